"""Which worker a request goes to: cached prefix by tier, minus load, with a balance guard.

The rule (docs/routing.md gives the reasons and the references):

    saved_w  = block_size * (w_fast * RAM blocks + w_slow * disk blocks + w_shared * shared blocks)
               over the longest consecutive prefix of the request that worker w can read
    cost_w   = new_weight * (prompt_tokens - saved_w) + load_weight * load_w
    load_w   = prefill tokens sent to w and not yet answered (their first byte not back yet)
               + decode_weight * requests streaming from w

and the request goes to the lowest cost, in units of prefill tokens. The tokens w must prefill
anew count twice (``new_weight`` 2): once as this request's wait, once as fleet capacity spent
(a duplicate prefill of a prefix another worker holds delays everyone's later requests); the
tokens already queued on w count once, as wait only (that work is committed wherever this
request goes). Costs within ``tie_tokens`` of the best are a tie, broken by session affinity,
then by the lower load, then by fewer requests routed so far (at low load every worker is idle:
by name alone, each new prefix went to the first worker and some workers got none).

Balance guard (SGLang's cache-aware router: absolute and relative thresholds): when the most
loaded healthy worker exceeds the least loaded by more than ``balance_abs`` tokens *and* by more
than ``balance_rel`` times, cache is ignored and the least loaded worker takes the request.

Speculative entries: the moment a request is routed, its blocks are assumed to be on that worker
(RAM) for ``speculative_ttl_s``, so a burst sharing a new prefix follows the first request
instead of spreading before the worker's events arrive. The same structure with a long ttl is
the "approximate" arm: routing history only, no events.

Tenants: block keys are rooted in the request's namespace (tenant, salt), so a request can only
ever match blocks of its own namespace: nothing here sees tenants at all.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .index import BlockIndex, PrefixMatch, WorkerPrefix


@dataclass(frozen=True)
class ScoreConfig:
    block_size: int = 32
    w_fast: float = 1.0  # a block in the worker's RAM saves its whole prefill
    w_slow: float = 0.8  # from its disk: the compute is saved, a read is paid
    w_shared: float = 0.6  # from the shared Redis: a network read (and every worker can have it)
    new_weight: float = 2.0  # a token prefilled anew: this request's wait + the fleet's capacity
    load_weight: float = 1.0  # a queued prefill token: this request's wait only
    decode_weight: float = 64.0  # tokens of prefill a streaming request's decode is worth
    balance_abs: float = 16_384.0  # tokens (SGLang: 32 requests; ~512 tokens each here)
    balance_rel: float = 1.5
    tie_tokens: float = 32.0  # costs this close are a tie: affinity, then load decides
    speculative_ttl_s: float = 10.0


@dataclass
class Load:
    """What the router knows of one worker's queue: it counts what it sent there."""

    prefill_tokens: int = 0  # sent, first byte not back yet
    streaming: int = 0  # first byte back, not finished

    def value(self, cfg: ScoreConfig) -> float:
        return self.prefill_tokens + cfg.decode_weight * self.streaming


@dataclass
class Candidate:
    worker: str
    cached_tokens: int  # predicted reuse: blocks of the readable prefix x block size
    saved: float
    load: float
    cost: float


@dataclass
class Decision:
    worker: str
    reason: str  # "cache", "load" (no worker had anything cached), "balance", "affinity", "only"
    predicted_cached_tokens: int
    candidates: list[Candidate] = field(default_factory=list)


class Speculative:
    """Blocks assumed on a worker because a request was just sent there, until ``ttl_s`` passes.
    Bounded: past ``capacity`` keys the oldest go first."""

    def __init__(
        self, ttl_s: float = 10.0, capacity: int = 200_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s, self.capacity, self._clock = ttl_s, capacity, clock
        self._keys: OrderedDict[bytes, dict[str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, keys: Sequence[bytes], worker: str) -> None:
        until = self._clock() + self.ttl_s
        d = self._keys
        for k in keys:
            entry = d.get(k)
            if entry is None:  # new keys land at the end already: half the dict work of a request
                d[k] = {worker: until}
            else:
                entry[worker] = until
                d.move_to_end(k)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def prefix(self, keys: Sequence[bytes]) -> dict[str, int]:
        """Per worker, the longest run of ``keys`` from the first assumed on it (unexpired)."""
        now = self._clock()
        alive: dict[str, int] = {}
        for i, k in enumerate(keys):
            entry = self._keys.get(k)
            if entry is None:
                break
            for w in [w for w, until in entry.items() if until <= now]:
                del entry[w]
            nxt = {w: i + 1 for w in entry if alive.get(w, 0) == i}
            if not nxt:
                break
            alive.update(nxt)
        return alive

    def forget(self, worker: str) -> None:
        for entry in self._keys.values():
            entry.pop(worker, None)


def merged(match: PrefixMatch | None, spec: dict[str, int], workers: Sequence[str]) -> dict[str, WorkerPrefix]:
    """The index's prefix per worker, lengthened by speculative blocks (counted as RAM: a block
    just prefilled there is in its first tier)."""
    out = {}
    for w in workers:
        p = match.workers.get(w) if match is not None else None
        p = p or WorkerPrefix(0, 0, 0, 0)
        extra = spec.get(w, 0) - p.blocks
        out[w] = WorkerPrefix(p.blocks + extra, p.fast + extra, p.slow, p.shared) if extra > 0 else p
    return out


def prefixes(
    keys: Sequence[bytes], names: Sequence[str], index: BlockIndex, spec: Speculative, history: Speculative | None
) -> dict[str, WorkerPrefix]:
    """Per worker in ``names``, the prefix the scorer weighs: the index's (events), lengthened by
    the speculative entries, and for a worker the index does not know, by the routing history
    (a worker whose events arrive is judged by them). The proxy and the fleet simulator both
    route through this, so the simulated arms take the router's own decisions."""
    got = spec.prefix(keys)
    known = index.workers
    if history is not None:
        for w, n in history.prefix(keys).items():
            if w not in known:
                got[w] = max(n, got.get(w, 0))
    match = index.prefix(keys) if keys and known else None
    return merged(match, got, names)


class Scorer:
    def __init__(self, cfg: ScoreConfig | None = None, affinity_capacity: int = 100_000) -> None:
        self.cfg = cfg or ScoreConfig()
        self._affinity: OrderedDict[str, str] = OrderedDict()
        self._affinity_capacity = affinity_capacity
        self.routed: dict[str, int] = {}  # requests decided per worker: the last tie-break

    def candidates(
        self, prompt_tokens: int, prefixes: dict[str, WorkerPrefix], loads: dict[str, Load]
    ) -> list[Candidate]:
        c, bs = self.cfg, self.cfg.block_size
        out = []
        for w, p in prefixes.items():
            # The worker looks up all but the last prompt token (its logits start the decode):
            # only the full blocks inside that can be hits.
            usable = min(p.blocks, max(0, prompt_tokens - 1) // bs)
            cached = usable * bs
            scale = usable / p.blocks if p.blocks else 0.0
            saved = scale * bs * (c.w_fast * p.fast + c.w_slow * p.slow + c.w_shared * p.shared)
            load = loads.get(w, Load()).value(c)
            cost = c.new_weight * (prompt_tokens - saved) + c.load_weight * load
            out.append(Candidate(w, cached, saved, load, cost))
        return out

    def choose(
        self,
        prompt_tokens: int,
        prefixes: dict[str, WorkerPrefix],
        loads: dict[str, Load],
        session: str | None = None,
    ) -> Decision:
        """The worker for a request among ``prefixes``' workers (the healthy ones)."""
        if not prefixes:
            raise ValueError("no worker to route to")
        cands = self.candidates(prompt_tokens, prefixes, loads)
        if len(cands) == 1:
            return self._decide(cands[0], "only", cands, session)
        lo = min(cands, key=lambda x: (x.load, x.worker))
        hi = max(x.load for x in cands)
        if hi - lo.load > self.cfg.balance_abs and hi > self.cfg.balance_rel * lo.load:
            return self._decide(lo, "balance", cands, session)
        best = min(x.cost for x in cands)
        ties = [x for x in cands if x.cost - best <= self.cfg.tie_tokens]
        sticky = self._affinity.get(session) if session is not None else None
        for x in ties:
            if len(ties) > 1 and x.worker == sticky:
                return self._decide(x, "affinity", cands, session)
        n = self.routed
        pick = min(ties, key=lambda x: (x.load, -x.saved, n.get(x.worker, 0), x.worker))
        return self._decide(pick, "cache" if pick.saved > 0 else "load", cands, session)

    def _decide(self, pick: Candidate, reason: str, cands: list[Candidate], session: str | None) -> Decision:
        self.routed[pick.worker] = self.routed.get(pick.worker, 0) + 1
        if session is not None:
            self._affinity[session] = pick.worker
            self._affinity.move_to_end(session)
            while len(self._affinity) > self._affinity_capacity:
                self._affinity.popitem(last=False)
        return Decision(pick.worker, reason, pick.cached_tokens, cands)
