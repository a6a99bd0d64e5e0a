"""An observed trace replay: the simulator's prefix semantics with a CacheObserver attached.

It differs from ``sim.simulate`` in what it reports, not in what it caches: every insert and
eviction reaches the observer (grouped by tenant), capacity may change during the run (to test
that a halving moves the indicators), and every ``window_s`` of trace time yields one row of the
features ``ctxcache analyze`` clusters. Kept apart from the simulator so its hot loop stays bare.
Offline policies (Belady) are not supported here: they need the whole future, not a live feed.

Also here: the two disturbances the tests inject into a real trace, a scan and a tenant flood.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError
from ..index import RadixIndex
from ..policies import Policy, make_policy
from ..sim.costmodel import CostModel, get_cost_model
from ..sim.traces import MOONCAKE_BLOCK, Request
from .observer import CacheObserver

SLOPE_POINTS = 12  # counter samples per window
FEATURES = ("hit_ratio", "eviction_rate", "eviction_entropy", "age_skew", "load_latency_s")


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@dataclass
class ReplayResult:
    windows: list[dict[str, Any]]
    hit_tokens: int
    input_tokens: int
    evictions: int

    @property
    def token_hit_ratio(self) -> float:
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0


class _Run:
    def __init__(self, policy: str | Policy, capacity_at: Callable[[float], int], window_s: float, cost: CostModel):
        self.clock = _Clock()
        self.pol = policy if isinstance(policy, Policy) else make_policy(policy, clock=self.clock)
        if getattr(self.pol, "offline", False):
            raise ConfigError(f"policy {self.pol.name!r} is offline: the observed replay feeds it live")
        self.pol.clock = self.clock
        self.idx = RadixIndex()
        self.pol.attach(self.idx)
        self.obs = CacheObserver(self.clock, window_s)
        self.capacity_at, self.window_s, self.cost = capacity_at, window_s, cost
        self.group: dict[Hashable, str] = {}
        self.hit = self.total = self.evicted = 0
        self.w: dict[str, float] = {}
        self.windows: list[dict[str, Any]] = []

    def request(self, r: Request, bs: int) -> None:
        blocks, n = r.blocks, len(r.blocks)
        h, parent = 0, None
        while h < n:
            node = self.idx.get(blocks[h])
            if node is None or node.parent != parent:
                break
            parent, h = blocks[h], h + 1
        toks = min(h * bs, r.input_length)
        self.hit += toks
        self.total += r.input_length
        w = self.w
        w["requests"] = w.get("requests", 0) + 1
        w["load_s"] = w.get("load_s", 0.0) + self.cost.prefill_s(r.input_length, toks)
        if h:  # before the store makes room, as the engine and the simulator do
            self.pol.on_hits(reversed(blocks[:h]))
        full = n if r.input_length >= n * bs else n - 1
        new = self._insert(blocks[:full], h, parent, r.tenant) if h < full else []
        for b in reversed(new):
            self.pol.on_insert(b)

    def _insert(self, blocks: Sequence[int], h: int, parent: Any, tenant: str) -> list[int]:
        need, cap = len(blocks) - h, self.capacity_at(self.clock.t)
        pinned = [self.idx.get(parent)] if h else []
        self.idx.pin(pinned)  # type: ignore[arg-type]
        try:
            while len(self.idx) + need > cap:
                victim = self.pol.evict(self.idx.is_evictable)
                if victim is None:
                    break
                self.idx.remove(victim)
                self.evicted += 1
                self.obs.block_evicted(victim, self.group.pop(victim, "?"))
        finally:
            self.idx.unpin(pinned)  # type: ignore[arg-type]
        new: list[int] = []
        for j in range(h, h + max(0, min(need, cap - len(self.idx)))):
            b = blocks[j]
            if b in self.idx:
                break
            self.idx.insert(b, parent, b"", j)
            self.group[b] = tenant
            self.obs.block_inserted(b)
            new.append(b)
            parent = b
        return new

    def close_window(self, start: float, hit0: int, total0: int, ev0: int) -> None:
        self.obs.sample(self.hit, self.total)
        snap = self.obs.snapshot()
        reqs = int(self.w.get("requests", 0))
        looked = self.total - total0
        self.windows.append({
            "t": start, "requests": reqs,
            "hit_ratio": (self.hit - hit0) / looked if looked else 0.0,
            "eviction_rate": (self.evicted - ev0) / self.window_s,
            "eviction_entropy": snap.eviction_entropy,
            "age_skew": snap.context_age_skew,
            "load_latency_s": self.w.get("load_s", 0.0) / reqs if reqs else 0.0,
            "hit_rate_slope": snap.hit_rate_slope_pct_per_min,
            "resident_blocks": len(self.idx),
        })  # fmt: skip
        self.w = {}


def replay(
    requests: Sequence[Request],
    policy: str | Policy,
    capacity: int | Callable[[float], int],
    *,
    window_s: float = 60.0,
    block_size: int = MOONCAKE_BLOCK,
    cost_model: str | CostModel = "llama3-8b-a100",
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    """Replay ``requests`` (time-ordered) and return one feature row per ``window_s`` of trace time.

    The eviction-entropy window equals ``window_s``, so each row describes its own window."""
    if window_s <= 0:
        raise ConfigError(f"window_s must be > 0, got {window_s}")
    cap_at = capacity if callable(capacity) else (lambda _t, c=capacity: c)
    if not callable(capacity) and capacity < 1:
        raise ConfigError(f"capacity must be >= 1 block, got {capacity}")
    cost = cost_model if isinstance(cost_model, CostModel) else get_cost_model(cost_model)
    run = _Run(policy, cap_at, window_s, cost)
    if not requests:
        return ReplayResult([], 0, 0, 0)
    start = requests[0].time
    marks = (run.hit, run.total, run.evicted)
    last_sample = -float("inf")
    for i, r in enumerate(requests):
        while r.time >= start + window_s:
            run.clock.t = start + window_s
            run.close_window(start, *marks)
            start += window_s
            marks = (run.hit, run.total, run.evicted)
        run.clock.t = r.time
        if r.time >= last_sample + window_s / SLOPE_POINTS:
            run.obs.sample(run.hit, run.total)  # points for the hit-rate slope inside each window
            last_sample = r.time
        run.request(r, block_size)
        if progress is not None and (i & 255) == 255:
            progress(256)
    run.clock.t = start + window_s
    run.close_window(start, *marks)
    return ReplayResult(run.windows, run.hit, run.total, run.evicted)


# --- disturbances --------------------------------------------------------------------------------
def assign_tenants(requests: Sequence[Request], n_tenants: int) -> list[Request]:
    """Spread a single-tenant trace over tenants by conversation (the block after the shared root)."""
    return [replace(r, tenant=f"t{(r.blocks[1] if len(r.blocks) > 1 else 0) % n_tenants}") for r in requests]


def _fresh_ids(requests: Sequence[Request]) -> int:
    return 1 + max((max(r.blocks) for r in requests if r.blocks), default=0)


def inject(
    requests: Sequence[Request],
    start_s: float,
    duration_s: float,
    rate_per_s: float,
    blocks_per_request: int,
    tenant: str | None,
    rng: random.Random,
    block_size: int = MOONCAKE_BLOCK,
) -> list[Request]:
    """Add requests of unique, never-reused blocks (a scan when spread over tenants, a flood from one).

    ``tenant=None``: each injected request takes a random existing tenant (a scan, e.g. a batch
    job over documents); else every injected request is that tenant's (a flood)."""
    tenants = sorted({r.tenant for r in requests})
    nxt = _fresh_ids(requests)
    extra: list[Request] = []
    for k in range(int(duration_s * rate_per_s)):
        blocks = tuple(range(nxt, nxt + blocks_per_request))
        nxt += blocks_per_request
        who = tenant if tenant is not None else rng.choice(tenants)
        t = start_s + k / rate_per_s
        extra.append(Request(t, blocks_per_request * block_size, 1, blocks, who))
    return sorted([*requests, *extra], key=lambda r: r.time)
