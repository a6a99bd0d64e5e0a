"""One simulated worker of the fleet: a real ContextCache (no threads) behind a cost model.

The cache is real: a RAM tier of ``kv_blocks`` blocks under a real eviction policy, optionally a
shared tier (``SharedStore``: one in-process store every worker's tier reads and writes, as a
Redis is), real lookups, stores, pins, demotions, promotions, discovery of what other workers put
in the shared store, and real KV events (``EngineWatch`` on an ``Emitter`` whose batches the fleet
hands to the router after ``event_lag_s``). What is modelled is the model: a request's prefill
takes ``CostModel.prefill_s(input, hit)`` (overhead + per-token time x uncached tokens + the
optional quadratic term) plus ``shared_read_s`` per token read from the shared store; one prefill
at a time per worker, in arrival order; decode ``decode_s`` per output token, concurrently with
the others. KV capacity: a request is admitted to prefill when the blocks it allocates (its
uncached prompt blocks and its output) fit beside those of the running requests, else it waits
(never refused; a worker with nothing running admits anything).

Each trace block id stands for 512 tokens; the cache sees it as ``BS`` tokens (its key chain is
what decides hits, not the token count), as sim/engine_replay.py does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine import Match
from ..events import Emitter, EventBatch, ListSink, WorkerStarted
from ..events.watch import EngineWatch
from ..keys import Prompt
from ..tiers.base import key_bytes
from ..tiers.fake import FakeSlowTier
from ..tiers.memory import MemoryTier
from .costmodel import CostModel
from .fleet_workloads import BLOCK, FleetRequest
from .regions_parts import SimCache

BS = 4  # cache tokens per 512-token block id
SHARED_TIER = "shared"
SHARED_STORE = "mem://fleet-shared"  # what WorkerStarted.stores names: the one store all workers read


def block_tokens(r: FleetRequest) -> list[int]:
    """The prompt as the cache sees it: BS tokens per full block id; a partial last block is one
    token (never a full block, so never cached, as a partial block of a real prompt)."""
    n = len(r.blocks)
    full = n if r.input_length >= n * BLOCK else n - 1
    out = [t for b in r.blocks[:full] for t in (b & 0xFFFF, (b >> 16) & 0xFFFF, (b >> 32) & 0xFFFF, 7)]
    return out + [1] * (full < n)


def full_blocks(r: FleetRequest) -> int:
    n = len(r.blocks)
    return n if r.input_length >= n * BLOCK else n - 1


@dataclass(frozen=True)
class WorkerSpec:
    cost: CostModel
    kv_blocks: int = 384  # KV capacity in 512-token blocks (also the RAM tier's size): ~196k tokens
    decode_s: float = 0.024  # seconds per output token of one request
    shared_read_s: float = 5e-6  # seconds per token read from the shared store (a network read)
    policy: str = "lru"
    shared_blocks: int = 1 << 30  # the shared store's capacity in blocks (each worker's charge)


class SharedStore:
    """The backend every worker's shared tier reads and writes: one dict, as one Redis."""

    def __init__(self) -> None:
        self.blobs: dict[bytes, bytes] = {}

    def tier(self, capacity: int) -> SharedTier:
        return SharedTier(self, capacity)


class SharedTier(FakeSlowTier):
    """A worker's view of the SharedStore: charged per worker (as a BlobTier is per process), any
    worker's writes visible to all. In-process instead of a redis-server per run: the same engine
    paths (write-through, discovery, promotion), none of the I/O."""

    kind = "shared-memory"
    shared = True  # other workers read what it holds: write-through by default (factory.write_mode)

    def __init__(self, store: SharedStore, capacity: int) -> None:
        super().__init__(capacity, "lru", name=SHARED_TIER)
        self.store = store.blobs  # FakeSlowTier's backend, now one dict for the fleet

    def might_contain_many(self, keys: Sequence[Hashable]) -> list[bool]:
        blobs = self.store
        return [key_bytes(k) in blobs for k in keys]


@dataclass
class Job:
    req: FleetRequest
    idx: int
    worker: int = -1
    predicted: int = 0  # cached tokens the router expected (its load bookkeeping)
    hit: int = 0  # cached tokens the worker read
    shared_hit: int = 0  # of which from the shared store
    need: int = 0  # KV blocks it allocates while running
    start: float = 0.0  # prefill start
    first: float = 0.0  # first token (TTFT = first - req.time)
    done: float = 0.0
    match: Match | None = field(default=None, repr=False)
    prompt: Prompt | None = field(default=None, repr=False)


class SimWorker:
    def __init__(
        self, name: str, spec: WorkerSpec, clock: Callable[[], float], *, shared: SharedStore | None = None,
        events: bool = False, cache: bool = True,
    ) -> None:  # fmt: skip
        self.name, self.spec = name, spec
        self.cache: SimCache | None = None
        self.sink = ListSink()
        self.emitter: Emitter | None = None
        if cache:
            tiers: list[Any] = [MemoryTier(spec.kv_blocks, spec.policy, high=1.0, low=1.0, name="ram")]
            if shared is not None:
                tiers.append(shared.tier(spec.shared_blocks))
            self.cache = SimCache(tiers, block_size=BS, clock=clock)
        if events and self.cache is not None:
            self.emitter = Emitter(name, [self.sink], clock=clock, epoch=f"1-{name}")
            shared_names = (SHARED_TIER,) if shared is not None else ()
            stores = (SHARED_STORE,) if shared is not None else ()
            self.emitter.emit(WorkerStarted(tuple(t.name for t in self.cache.tiers), shared_names, BS, stores))
            EngineWatch(self.cache._engine, self.emitter).attach()
        self.waiting: deque[Job] = deque()
        self.prefilling: Job | None = None
        self.kv_used = 0
        self.running = 0
        self.requests = 0
        self.prefill_tokens = 0  # tokens prefilled (uncached): the worker's compute load
        self.busy_s = 0.0
        self._kv_area = 0.0  # integral of kv_used over time: the mean fill
        self._kv_t = 0.0

    # --- what the fleet calls ------------------------------------------------------------------------
    def enqueue(self, job: Job) -> None:
        self.requests += 1
        self.waiting.append(job)

    def backlog_s(self, now: float, duration: Callable[[Job], float]) -> float:
        """Seconds of prefill ahead of a request sent here now (the oracle's perfect balance)."""
        ahead = max(0.0, self.prefilling.first - now) if self.prefilling is not None else 0.0
        return ahead + sum(duration(j) for j in self.waiting)

    def try_start(self, now: float, fixed_hit: bool) -> Job | None:
        """Start the next prefill if the worker is free and its KV fits; the job, or None."""
        if self.prefilling is not None or not self.waiting:
            return None
        job = self.waiting[0]
        r = job.req
        if not fixed_hit:
            self._lookup(job)
        new_blocks = -(-(r.input_length - job.hit) // BLOCK)
        job.need = new_blocks + -(-r.output_length // BLOCK)
        if self.running and self.kv_used + job.need > self.spec.kv_blocks:
            self._release(job)  # head of line waits for a request to finish; it looks again then
            return None
        self.waiting.popleft()
        self._kv(now, job.need)
        self.running += 1
        job.start = now
        job.first = now + self.prefill_s(job)
        self.prefilling = job
        self.prefill_tokens += r.input_length - job.hit
        self.busy_s += job.first - now
        return job

    def prefill_s(self, job: Job) -> float:
        r = job.req
        return self.spec.cost.prefill_s(r.input_length, job.hit) + self.spec.shared_read_s * job.shared_hit

    def prefilled(self, job: Job) -> None:
        """Its first token: the new full blocks are stored (and announced)."""
        self.prefilling = None
        if self.cache is None or job.prompt is None:
            return
        have = job.match.n_blocks if job.match is not None else 0
        self.cache.store(job.prompt, [b"x"] * max(0, full_blocks(job.req) - have), first_block=have)
        self._settle()

    def finished(self, now: float, job: Job) -> None:
        self._kv(now, -job.need)
        self.running -= 1
        self._release(job)

    def batches(self) -> list[EventBatch]:
        """The KV events since the last call, as the emitter's thread would send them (one batch)."""
        if self.emitter is None:
            return []
        self.emitter.flush()
        out, self.sink.batches = self.sink.batches, []
        return out

    def kv_area(self, now: float) -> float:
        """Block-seconds of KV held by running requests from 0 to ``now`` (mean fill between two
        readings: their difference / (capacity x the time between))."""
        return self._kv_area + self.kv_used * max(0.0, now - self._kv_t)

    # --- inside -------------------------------------------------------------------------------------
    def _lookup(self, job: Job) -> None:
        assert self.cache is not None
        if job.prompt is None:
            job.prompt = self.cache.prompt(block_tokens(job.req))
        p = job.prompt
        m = self.cache.lookup(p.prefix(len(p) - 1))  # the last token is always prefilled
        self._settle()
        job.match = m
        job.hit = min(m.n_blocks * BLOCK, job.req.input_length - 1)
        shared = m.usage.by_tier.get(SHARED_TIER, 0) // BS * BLOCK
        job.shared_hit = min(shared, job.hit)

    def _release(self, job: Job) -> None:
        if job.match is not None and self.cache is not None:
            self.cache.release(job.match)
        job.match = None

    def _settle(self) -> None:
        """The writes a lookup or a store queued to the shared tier land now (the mover's thread,
        stepped in place: no threads, the run stays deterministic)."""
        assert self.cache is not None
        mover = self.cache._engine.placement.mover
        while mover.step():
            pass

    def _kv(self, now: float, delta: int) -> None:
        self._kv_area += self.kv_used * (now - self._kv_t)
        self._kv_t = now
        self.kv_used += delta

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
