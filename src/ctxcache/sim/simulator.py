"""Trace-driven simulator: the live cache's RadixIndex and Policy objects, replayed over a trace.

Two semantics:
- ``prefix`` (default): a request hits only its longest resident leading run of blocks; the rest
  is "prefilled" and inserted. Eviction obeys the index (only unpinned leaves), exactly as in
  ContextCache; the request's hit prefix is pinned while room is made for its new blocks.
- ``object``: every block id is an independent object (libCacheSim's model), for cross-checks.

Offline policies (``offline = True``, e.g. Belady) get the future: ``set_future(next_use)`` with,
for every access position, the position of that block's next access; the simulator sets
``policy.position`` before each hit or insert.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..index import RadixIndex
from ..policies import POLICIES, Policy, make_policy
from ..policies.base import Offline, as_offline
from .costmodel import CostModel
from .traces import MOONCAKE_BLOCK, Request

SEMANTICS = ("prefix", "object")


@dataclass
class SimResult:
    policy: str
    size_blocks: int
    size_fraction: float
    semantics: str
    requests: int
    block_accesses: int
    misses: int
    miss_ratio: float
    token_hit_ratio: float
    est_prefill_s_saved: float
    accesses_per_s: float
    input_tokens: int = 0
    hit_tokens: int = 0
    params: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Trace:
    """A trace materialised for replay: flat block stream plus per-request offsets."""

    requests: list[Request]
    block_size: int = MOONCAKE_BLOCK

    def __post_init__(self) -> None:
        lens = [len(r.blocks) for r in self.requests]
        self.offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        self.stream = np.fromiter((b for r in self.requests for b in r.blocks), dtype=np.int64, count=int(sum(lens)))
        self.unique_blocks = int(np.unique(self.stream).size) if self.stream.size else 0
        self._next_use: np.ndarray | None = None

    @property
    def next_use(self) -> np.ndarray:
        """For each access position, the position of the same block's next access (or a huge value)."""
        if self._next_use is None:
            nxt = np.full(self.stream.size, np.iinfo(np.int64).max, dtype=np.int64)
            last: dict[int, int] = {}
            ids = self.stream.tolist()
            for i in range(len(ids) - 1, -1, -1):
                b = ids[i]
                j = last.get(b)
                if j is not None:
                    nxt[i] = j
                last[b] = i
            self._next_use = nxt
        return self._next_use

    def capacity(self, size: float) -> int:
        """Blocks for a size given as a fraction of unique blocks (< 1... or == 1.0) or a block count (> 1)."""
        if not size > 0:
            raise ConfigError(f"size must be > 0, got {size}")
        if size <= 1.0:
            return max(1, int(math.floor(size * self.unique_blocks + 0.5)))
        return int(size)


def _block_tokens(r: Request, j: int, bs: int) -> int:
    """Tokens of block j of a request: full blocks, the last one partial."""
    return min(bs, max(0, r.input_length - j * bs))


def simulate(
    trace: Trace,
    policy: str | dict[str, Any] | Policy,
    capacity: int,
    *,
    semantics: str = "prefix",
    cost_model: CostModel | None = None,
    size_fraction: float | None = None,
    progress: Callable[[int], None] | None = None,
    partial: bool = False,
    on_request: Callable[[Request, int], None] | None = None,
) -> SimResult:
    """Replay ``trace`` through a cache of ``capacity`` blocks managed by ``policy``.

    ``partial``: in prefix semantics, also cache each request's trailing partial block (the
    trace's raw block model); by default it is not cached, as in the live cache.
    ``on_request(request, hit_tokens)``: called after each request (prefix semantics).
    """
    if semantics not in SEMANTICS:
        raise ConfigError(f"unknown semantics {semantics!r}; known: {', '.join(SEMANTICS)}")
    if capacity < 1:
        raise ConfigError(f"capacity must be >= 1 block, got {capacity}")
    clock = _TraceClock()
    pol = policy if isinstance(policy, Policy) else _make(policy, clock, capacity)
    pol.clock = clock  # the simulator owns time: trace seconds, for instances passed in too
    fut = as_offline(pol)
    if fut is not None:
        fut.set_future(trace.next_use)
    t0 = time.perf_counter()
    if semantics == "object":
        misses, hit_tokens, saved = _run_object(trace, pol, capacity, clock), 0, 0.0
    else:
        misses, hit_tokens, saved = _run_prefix(trace, pol, capacity, clock, cost_model, progress, partial, on_request)
    elapsed = max(time.perf_counter() - t0, 1e-9)
    n = int(trace.stream.size)
    input_tokens = sum(r.input_length for r in trace.requests)
    return SimResult(
        policy=pol.name,
        size_blocks=capacity,
        size_fraction=size_fraction if size_fraction is not None else capacity / max(1, trace.unique_blocks),
        semantics=semantics,
        requests=len(trace.requests),
        block_accesses=n,
        misses=misses,
        miss_ratio=misses / n if n else 0.0,
        token_hit_ratio=hit_tokens / input_tokens if input_tokens and semantics == "prefix" else 0.0,
        est_prefill_s_saved=saved,
        accesses_per_s=n / elapsed,
        input_tokens=input_tokens,
        hit_tokens=hit_tokens,
        params=pol.params() or None,
    )


def _make(spec: str | dict[str, Any], clock: Callable[[], float], capacity: int) -> Policy:
    name = spec if isinstance(spec, str) else spec.get("name")
    cls = POLICIES.get(name) if isinstance(name, str) else None
    if cls is not None and cls.needs_capacity:
        return make_policy(spec, clock=clock, capacity=capacity)
    return make_policy(spec, clock=clock)


class _TraceClock:
    """Trace time in seconds: what time-aware policies see during a replay."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _run_object(trace: Trace, pol: Policy, capacity: int, clock: _TraceClock) -> int:
    # The loop is the policy's (Policy.replay_object): the reference one through the public
    # methods, or a policy's own with those methods fused into it (docs/policies.md, "Speed").
    return pol.replay_object(trace.requests, capacity, clock)


def _run_prefix(
    trace: Trace,
    pol: Policy,
    capacity: int,
    clock: _TraceClock,
    cost: CostModel | None,
    progress: Callable[[int], None] | None,
    partial: bool,
    on_request: Callable[[Request, int], None] | None = None,
) -> tuple[int, int, float]:
    idx = RadixIndex()
    pol.attach(idx)
    get = idx.getter
    fut = as_offline(pol)
    can_evict = idx.is_evictable
    bs = trace.block_size
    misses = hit_tokens = 0
    saved = 0.0
    pos = 0
    for r_i, r in enumerate(trace.requests):
        clock.t = r.time
        blocks = r.blocks
        n = len(blocks)
        h = 0
        parent: Any = None
        while h < n:
            node = get(blocks[h])
            if node is None or node.parent != parent:
                break
            parent = blocks[h]
            h += 1
        toks = min(h * bs if h < n else r.input_length, r.input_length) if h else 0
        if h:
            hit_tokens += toks
            if cost is not None:
                saved += cost.saved_s(r.input_length, toks)
            _report_hits(pol, fut, blocks, h, pos)
        if on_request is not None:
            on_request(r, toks)
        if h < n:
            misses += n - h
            # Like ContextCache, never store a trailing partial block (its id changes when the
            # next turn extends it), unless the caller asked for the trace's raw block model.
            full = n if partial or r.input_length >= n * bs else n - 1
            if h < full:
                new = _insert_chain(idx, pol, capacity, blocks[:full], h, parent, can_evict)
                _report_new(pol, fut, blocks, h, new, pos)
        pos += n
        if progress is not None and (r_i & 255) == 255:
            progress(256)
    if progress is not None:
        progress(len(trace.requests) & 255)
    return misses, hit_tokens, saved


def _report_hits(pol: Policy, fut: Offline | None, blocks: Sequence[int], h: int, pos: int) -> None:
    """Tell the policy about a request's hit prefix, deepest first, before its store makes room.

    The live engine's order: ``lookup`` counts the hits (deepest first, so ancestors look more
    recently used) and pins the prefix, and only then does ``store`` evict and admit the new
    blocks. Reporting the hits after the store instead ranked the prefix by its previous use while
    the store's victim search ran: the search reached the pinned prefix more often, and lfu and
    lfu-decay, which count a refusal as a use, then counted one request's use of it twice (the
    refusal, then the hit). The engine counts a refusal too, but only after the hit, as here now.
    """
    if fut is not None:
        for j in range(h - 1, -1, -1):
            fut.position = pos + j
            pol.on_hit(blocks[j])
        return
    pol.on_hits(reversed(blocks[:h]))


def _report_new(pol: Policy, fut: Offline | None, blocks: Sequence[int], h: int, new: list[int], pos: int) -> None:
    """Tell the policy about a request's new blocks, deepest first (as ``Slot.admit_chain``)."""
    if fut is not None:
        for j in range(h + len(new) - 1, h - 1, -1):
            fut.position = pos + j
            pol.on_insert(blocks[j])
        return
    for b in reversed(new):
        pol.on_insert(b)


def _insert_chain(
    idx: RadixIndex,
    pol: Policy,
    capacity: int,
    blocks: Sequence[int],
    h: int,
    parent: Any,
    can_evict: Callable[[Any], bool],
) -> list[int]:
    """Make room (the hit prefix pinned), then index blocks h.. under ``parent``. Returns those placed."""
    need = len(blocks) - h
    pinned = [idx.get(parent)] if h else []
    idx.pin(pinned)  # type: ignore[arg-type]
    try:
        while len(idx) + need > capacity:
            victim = pol.evict(can_evict)
            if victim is None:
                break
            idx.remove(victim)
    finally:
        idx.unpin(pinned)  # type: ignore[arg-type]
    room = min(need, capacity - len(idx))
    new = []
    for j in range(h, h + room):
        b = blocks[j]
        if b in idx:  # a malformed trace reuses an id under another parent: keep the old one
            break
        idx.insert(b, parent, b"", j)
        new.append(b)
        parent = b
    return new
