"""The fleet simulator's routing arms. The cache-aware ones are the router itself: its Scorer,
its Speculative entries and history, its BlockIndex fed with the workers' real KV events, and its
prefix assembly (``router.score.prefixes``, which the proxy calls too); only the load bookkeeping
is repeated here, as the proxy does it (prefill tokens sent and not yet answered, requests
streaming).

* ``random``, ``round-robin``: no knowledge.
* ``least-loaded``: the lowest router load (``Load.value``), no cache knowledge.
* ``approximate``: the router without ``--redis``: its own routing history (what it sent where) and
  speculative entries; the index gets no events (the workers publish none).
* ``precise``: the router with ``--redis``: the index fed by every worker's KV events, delivered
  ``event_lag_s`` after the change; speculative entries cover the lag.
* ``precise-shared``: ``precise`` over workers that also share one store (a Redis tier).
* ``oracle``: the reference, not a router: one infinite cache shared by every worker (a request
  hits every block any earlier request had, as soon as that request arrived) and perfect balance
  (the worker whose prefill queue empties first, known exactly).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from ..events import EventBatch
from ..router.index import BlockIndex
from ..router.score import Load, ScoreConfig, Scorer, Speculative, prefixes
from ..tiers.memory import MemoryTier
from .fleet_worker import BS, Job, SimWorker, block_tokens
from .fleet_workloads import BLOCK
from .regions_parts import SimCache

ARMS = ("random", "round-robin", "least-loaded", "approximate", "precise", "precise-shared", "oracle")
EVENT_ARMS = frozenset({"precise", "precise-shared"})
HISTORY_TTL_S = 600.0  # router/cli.py's build_router: the approximate arm's history


class Arm:
    name = ""
    fixed_hit = False  # the worker's hit is decided at routing (the oracle), not by its own cache
    needs_keys = False

    def __init__(self, names: Sequence[str], clock: Callable[[], float], rng: random.Random, cfg: ScoreConfig):
        self.names, self.clock, self.rng, self.cfg = list(names), clock, rng, cfg
        self.loads = {n: Load() for n in names}
        self.applied = 0  # event batches applied to the index

    def pick(self, job: Job, keys: list[bytes], workers: Sequence[SimWorker], now: float) -> tuple[int, int]:
        """(worker index, cached tokens expected there)."""
        raise NotImplementedError

    def apply(self, batch: EventBatch) -> None:
        raise AssertionError(f"the {self.name} arm takes no KV events")

    # --- the proxy's load bookkeeping (router/proxy.py: send and the first byte) --------------------
    def sent(self, job: Job) -> None:
        self.loads[self.names[job.worker]].prefill_tokens += max(0, job.req.input_length - job.predicted)

    def first(self, job: Job) -> None:
        load = self.loads[self.names[job.worker]]
        load.prefill_tokens -= max(0, job.req.input_length - job.predicted)
        load.streaming += 1

    def done(self, job: Job) -> None:
        self.loads[self.names[job.worker]].streaming -= 1


class RandomArm(Arm):
    name = "random"

    def pick(self, job: Job, keys: list[bytes], workers: Sequence[SimWorker], now: float) -> tuple[int, int]:
        return self.rng.randrange(len(self.names)), 0


class RoundRobin(Arm):
    name = "round-robin"
    _next = 0

    def pick(self, job: Job, keys: list[bytes], workers: Sequence[SimWorker], now: float) -> tuple[int, int]:
        i, self._next = self._next, (self._next + 1) % len(self.names)
        return i, 0


class LeastLoaded(Arm):
    name = "least-loaded"

    def pick(self, job: Job, keys: list[bytes], workers: Sequence[SimWorker], now: float) -> tuple[int, int]:
        cfg = self.cfg
        return min(range(len(self.names)), key=lambda i: (self.loads[self.names[i]].value(cfg), i)), 0


class Scored(Arm):
    """The router's decision: ``prefixes`` (index + speculative + history) -> ``Scorer.choose``."""

    name = "approximate"
    needs_keys = True

    def __init__(self, names: Sequence[str], clock: Callable[[], float], rng: random.Random, cfg: ScoreConfig):
        super().__init__(names, clock, rng, cfg)
        self.scorer = Scorer(cfg)
        self.index = BlockIndex(worker_ttl_s=math.inf, clock=clock)
        self.spec = Speculative(cfg.speculative_ttl_s, clock=clock)
        self.history = Speculative(HISTORY_TTL_S, capacity=2_000_000, clock=clock)
        self._pos = {n: i for i, n in enumerate(names)}
        self.reasons: dict[str, int] = {}

    def pick(self, job: Job, keys: list[bytes], workers: Sequence[SimWorker], now: float) -> tuple[int, int]:
        found = prefixes(keys, self.names, self.index, self.spec, self.history)
        d = self.scorer.choose(job.req.input_length, found, self.loads, job.req.session)
        self.reasons[d.reason] = self.reasons.get(d.reason, 0) + 1
        self.spec.add(keys, d.worker)  # Router.sent
        self.history.add(keys, d.worker)
        return self._pos[d.worker], d.predicted_cached_tokens


class Precise(Scored):
    name = "precise"

    def apply(self, batch: EventBatch) -> None:
        # apply_many: a batch's consecutive stores in one table insert (as a replay is applied);
        # the same result as apply (tests/router/test_index.py checks it), in fewer numpy calls
        self.applied += self.index.apply_many([batch])


class PreciseShared(Precise):
    name = "precise-shared"


class Oracle(Arm):
    name = "oracle"
    fixed_hit = True

    def __init__(self, names: Sequence[str], clock: Callable[[], float], rng: random.Random, cfg: ScoreConfig):
        super().__init__(names, clock, rng, cfg)
        self.cache = SimCache([MemoryTier(1 << 40, "lru", high=1.0, low=1.0)], block_size=BS, clock=clock)

    def pick(self, job: Job, keys: list[bytes], workers: Sequence[SimWorker], now: float) -> tuple[int, int]:
        r = job.req
        p = self.cache.prompt(block_tokens(r))
        with self.cache.lookup(p.prefix(len(p) - 1)) as m:
            job.hit = min(m.n_blocks * BLOCK, r.input_length - 1)
            self.cache.store(p, [b"x"] * max(0, p.n_blocks - m.n_blocks), first_block=m.n_blocks)

        def wait(i: int) -> tuple[float, int, int, int]:
            w = workers[i]
            return w.backlog_s(now, w.prefill_s), w.kv_used, w.requests, i

        i = min(range(len(workers)), key=wait)
        return i, job.hit

    def close(self) -> None:
        self.cache.close()


_CLASSES: dict[str, type[Arm]] = {
    c.name: c for c in (RandomArm, RoundRobin, LeastLoaded, Scored, Precise, PreciseShared, Oracle)
}


def make_arm(name: str, names: Sequence[str], clock: Callable[[], float], rng: random.Random, cfg: ScoreConfig) -> Arm:
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown router arm {name!r}; known: {', '.join(ARMS)}") from None
    return cls(names, clock, rng, cfg)
