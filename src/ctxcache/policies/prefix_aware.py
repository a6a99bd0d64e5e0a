"""prefix-aware: evict the evictable leaf with the lowest learned hit density (docs/prefix-aware.md).

Per class, the probability of reuse against the time since the last access is learned online
("KVCache Cache in the Wild", ATC'25: one curve per request category) and ranked as hit density,
hits per unit of space-time, by class and age (LHD, NSDI'18).

- Class: access frequency with decay (halves every ``freq_half_life`` idle seconds, 0 = never;
  capped at ``max_count``), optionally x request context: blocks the request added (``new_edges``)
  and whether its deepest hit was a private history, used < ``shared_count`` times (0 = off).
  Notifications come deepest first and end at depth 0, so a request's blocks are classed together.
- Curve: an access starts a lifetime that ends in a reuse at some age (a hit, or a miss on a ghost:
  evicted blocks keep class, last access and count for ``ghost_factor`` x the characteristic time,
  at most ``ghost_factor`` x resident entries) or unreused when its ghost expires.  Per class, a
  histogram of reuse ages (half-octave bins) and the unreused count, faded by ``decay`` every
  ``update_every`` lifetimes; classes borrow ``prior`` lifetimes of the pooled curve.
- Hit density at age a, T = ``horizon`` x characteristic time (resident / insert rate): P(reuse in
  (a, a+T] | alive at a) / E[space-time held in (a, a+T]], x recompute weight 1 + ``cost_weight`` x
  depth (deep blocks cost more prefill; 0 = rank by token hits alone).
- Victim, leaf-first: one heap per class (oldest first) over the index's evictable leaves (via
  ``index.watch``); the lowest-HD head wins if below ``margin`` x the oldest leaf's HD, else the
  oldest leaf (LRU).  LRU until ``warmup`` lifetimes have ended.  Without ``attach`` (object
  semantics) every key is evictable and every access its own request.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from .base import CanEvict, Key, Policy
from .registry import register
from .replay import native_replay

_Head = tuple[float, float, int, Key, int]  # value, last access, heap seq, key, class
_NBINS = 30  # half-octave age bins: [0, 1), [1, 1.41), ... up to ~2^14.5 s
_MID = [0.5] + [2.0 ** ((b - 0.5) / 2.0) for b in range(1, _NBINS)]  # representative age per bin
_INLINED = ("_ended", "_refit", "_push", "_count", "_count_insert", "_touch", "_flush", "_head", "_valued", "_choose")


def _bin(age: float) -> int:
    return 0 if age < 1.0 else min(_NBINS - 1, int(2.0 * math.log2(age)) + 1)


@register
class PrefixAware(Policy):
    name = "prefix-aware"

    def __init__(
        self,
        *,
        max_count: int = 4,
        freq_half_life: float = 0.0,
        new_edges: tuple[int, ...] = (),
        shared_count: float = 0.0,
        cost_weight: float = 0.0,
        horizon: float = 1.5,
        margin: float = 0.4,
        ghost_factor: float = 4.0,
        prior: float = 2.0,
        update_every: int = 2048,
        decay: float = 0.9,
        warmup: int = 1000,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        ok = [max_count >= 1, freq_half_life >= 0, shared_count >= 0, cost_weight >= 0, horizon > 0]
        ok += [0 < margin <= 1, ghost_factor > 0, prior > 0, update_every >= 1, 0 < decay <= 1, warmup >= 0]
        if not all(ok):
            raise ConfigError("prefix-aware: a parameter is out of range (ranges: docs/prefix-aware.md)")
        self.max_count, self.freq_half_life = max_count, freq_half_life
        self.new_edges, self.shared_count = tuple(sorted(new_edges)), shared_count
        self.cost_weight, self.horizon, self.margin = cost_weight, horizon, margin
        self.ghost_factor, self.prior = ghost_factor, prior
        self.update_every, self.decay, self.warmup = update_every, decay, warmup
        n = max_count * (len(self.new_edges) + 1) * (2 if shared_count > 0 else 1)
        self._hist = [[0.0] * _NBINS for _ in range(n)]  # decayed reuses per class and age bin
        self._unused = [0.0] * n  # decayed lifetimes that ended unreused
        self._hd = [[1.0] * _NBINS for _ in range(n)]  # hit density per class and age bin
        self._events, self._learned = 0, False
        # key -> [class, last access, count, depth, heap seq (-1: not classed yet, 0: waits to be a leaf)]
        self._meta: dict[Key, list[Any]] = {}
        # key -> class, last access, count, evicted at; oldest eviction first
        self._ghost: OrderedDict[Key, tuple[int, float, float, float]] = OrderedDict()
        self._pending: list[tuple[Key, bool, float]] = []  # request's (key, inserted, count before)
        self._tau = 0.0  # characteristic time: resident blocks / insert rate
        self._ins_n, self._ins_t0, self._ins_last = 0, math.nan, -math.inf
        self._heaps: list[list[tuple[float, int, Key]]] = [[] for _ in range(n)]
        self._evictable: set[Key] = set()
        self._index: Any = None
        self._seq = itertools.count(1)
        self._hv: list[_Head | None] = [None] * n  # cached class heads, for bursts of evictions
        self._dirty: set[int] = set()
        self._hv_key: tuple[float, CanEvict] = (-math.inf, None)  # (time, can_evict) heads were valued at

    def params(self) -> dict[str, Any]:
        names = ("max_count", "freq_half_life", "new_edges", "shared_count", "cost_weight", "horizon",
                 "margin", "ghost_factor", "prior", "update_every", "decay", "warmup")  # fmt: skip
        return {k: list(self.new_edges) if k == "new_edges" else getattr(self, k) for k in names}

    def _ended(self, cls: int, age: float, reused: bool) -> None:
        if reused:
            self._hist[cls][_bin(age)] += 1.0
        else:
            self._unused[cls] += 1.0
        self._events += 1
        if self._events % self.update_every == 0:
            self._refit()

    def _refit(self) -> None:
        horizon = self.horizon * max(self._tau, 1.0)
        pooled = [sum(h[b] for h in self._hist) for b in range(_NBINS)]
        pooled_unused = sum(self._unused)
        total = sum(pooled) + pooled_unused
        w = self.prior / total if total > 0 else 0.0
        for c, hist in enumerate(self._hist):
            r = [hist[b] + w * pooled[b] for b in range(_NBINS)]
            alive = self._unused[c] + w * pooled_unused + sum(r)
            hd = self._hd[c]
            for i in range(_NBINS):
                a = _MID[i]
                hits = spent = 0.0
                for b in range(i, _NBINS):
                    dt = _MID[b] - a if b > i else 0.25 * a + 0.25
                    if dt > horizon:
                        break
                    hits += r[b]
                    spent += r[b] * dt
                spent += (alive - hits) * horizon
                hd[i] = hits / spent if spent > 0 else 0.0
                alive -= r[i]
        self._learned = self._events >= self.warmup
        self._hv_key = (-math.inf, None)
        d = self.decay
        for hist in self._hist:
            hist[:] = [x * d for x in hist]
        self._unused = [x * d for x in self._unused]

    def attach(self, index: Any) -> None:
        self._index = index
        index.watch(self._on_evictable)
        self._evictable = set(index.evictable())

    def _on_evictable(self, key: Key, evictable: bool) -> None:
        if evictable:
            self._evictable.add(key)
            meta = self._meta.get(key)
            if meta is not None and meta[4] >= 0:
                self._push(key, meta)
        else:
            self._evictable.discard(key)

    def _push(self, key: Key, meta: list[Any]) -> None:
        meta[4] = next(self._seq)
        heapq.heappush(self._heaps[meta[0]], (meta[1], meta[4], key))
        self._dirty.add(meta[0])

    def _count(self, count: float, last: float, now: float) -> float:
        return count * 0.5 ** ((now - last) / self.freq_half_life) + 1.0 if self.freq_half_life else count + 1.0

    def _count_insert(self, now: float) -> None:
        """One more insert for the rate behind tau (resident blocks / inserts per second).

        A window holds the inserts of whole clock readings, [start, end): it closes at the first
        insert of a new reading once it holds 1,024, and that insert opens the next one. The trace
        clock gives a request's blocks one time stamp: closing on zero elapsed time threw a
        window's inserts away (bursts of 3,000 per stamp were measured as 1,024), and closing
        mid-burst set part of a burst against whole periods (300 per 0.5 s gave tau 2.55 for 2.5)."""
        if now > self._ins_last and self._ins_n >= 1024:
            tau = len(self._meta) * (now - self._ins_t0) / self._ins_n
            self._tau = tau if self._tau <= 0 else 0.7 * self._tau + 0.3 * tau
            self._ins_n, self._ins_t0 = 0, now
        elif math.isnan(self._ins_t0):
            self._ins_t0 = now
        self._ins_n += 1
        self._ins_last = now

    @property
    def characteristic_time(self) -> float:
        """tau in seconds: resident blocks / insert rate, as last measured (0 until measured)."""
        return self._tau

    def _touch(self, key: Key, inserted: bool) -> None:
        now = self.clock()
        meta = self._meta.get(key)
        node = self._index.get(key) if self._index is not None else None
        depth = node.depth if node is not None else 0
        if meta is None:
            ghost = self._ghost.pop(key, None)
            count = prev = 1.0
            if ghost is not None:  # a reuse the cache missed: still evidence for its class and age
                self._ended(ghost[0], now - ghost[1], True)
                prev = ghost[2]
                count = self._count(prev, ghost[1], now)
            self._meta[key] = [0, now, count, depth, -1]
            self._count_insert(now)
        else:
            self._ended(meta[0], now - meta[1], True)
            prev = meta[2]
            meta[1:3] = now, self._count(prev, meta[1], now)
            meta[4] = -1
        self._pending.append((key, inserted, prev))
        if depth == 0:
            self._flush()

    def _flush(self) -> None:
        """Class the blocks of the request just notified and queue the evictable ones."""
        pending, self._pending, now = self._pending, [], self.clock()
        added = sum(1 for _, ins, _ in pending if ins)
        ctx = sum(1 for edge in self.new_edges if added >= edge)
        if self.shared_count > 0:  # a continuation hit a private history, not a shared prompt
            deepest = next((c for _, ins, c in pending if not ins), 0.0)
            ctx = 2 * ctx + (1 if 0 < deepest < self.shared_count else 0)
        base = ctx * self.max_count
        watched = self._index is not None
        for key, _, _ in pending:
            meta = self._meta.get(key)
            if meta is None:
                continue
            meta[0] = base + min(int(meta[2]), self.max_count) - 1
            if not watched or key in self._evictable:
                self._push(key, meta)
            else:
                meta[4] = 0  # queued once it becomes a leaf
        limit, ghost = self.ghost_factor * max(len(self._meta), 1), self._ghost
        horizon = self.ghost_factor * self._tau if self._tau > 0 else math.inf
        while ghost:  # expire ghosts: those lifetimes ended unreused
            key = next(iter(ghost))
            cls, last, _, gone = ghost[key]
            if len(ghost) <= limit and now - gone <= horizon:
                break
            del ghost[key]
            self._ended(cls, gone - last, False)

    def on_insert(self, key: Key) -> None:
        self._touch(key, True)

    def on_hit(self, key: Key) -> None:
        self._touch(key, False)

    def on_remove(self, key: Key) -> None:
        self._meta.pop(key, None)

    def _head(self, c: int, now: float, can_evict: CanEvict) -> _Head | None:
        """Class c's oldest allowed leaf, stale heap entries dropped on the way."""
        heap, meta_of = self._heaps[c], self._meta
        while heap:
            last, seq, key = heap[0]
            meta = meta_of.get(key)
            if meta is None or meta[4] != seq:
                heapq.heappop(heap)  # stale: touched, moved or gone since
                continue
            if can_evict is not None and not can_evict(key):
                heapq.heappop(heap)  # an interior or pinned block: requeued when it is a leaf
                meta[4] = 0
                continue
            return self._valued(c, now, last, seq, key, meta[3])
        return None

    def _valued(self, c: int, now: float, last: float, seq: int, key: Key, depth: int) -> _Head:
        if not self._learned:
            return (0.0, last, seq, key, c)
        return (self._hd[c][_bin(now - last)] * (1.0 + self.cost_weight * depth), last, seq, key, c)

    def _peek_head(self, c: int, now: float, can_evict: CanEvict) -> _Head | None:
        """Class c's head as ``evict`` finds it (past refused blocks, which it drops), heap untouched."""
        meta_of = self._meta
        for last, seq, key in sorted(self._heaps[c]):  # a scan: peek is not on a hot path
            meta = meta_of.get(key)
            if meta is not None and meta[4] == seq and (can_evict is None or can_evict(key)):
                return self._valued(c, now, last, seq, key, meta[3])
        return None

    def _choose(self, live: list[_Head]) -> _Head:
        oldest = min(live, key=lambda h: (h[1], h[2]))
        low = min(live)
        return low if low[0] < self.margin * oldest[0] else oldest

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        if self._pending:
            self._flush()
        now = self.clock()
        live = [h for c in range(len(self._heaps)) if (h := self._peek_head(c, now, can_evict))]
        if not live:  # evict would requeue every block in _meta's order and try once more
            heads: dict[int, _Head] = {}
            for seq, (key, m) in enumerate(self._meta.items()):
                if (can_evict is None or can_evict(key)) and (m[0] not in heads or m[1] < heads[m[0]][1]):
                    heads[m[0]] = self._valued(m[0], now, m[1], seq, key, m[3])
            live = list(heads.values())
        return self._choose(live)[3] if live else None

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        if self._pending:
            self._flush()
        now = self.clock()
        heads, dirty, meta_of = self._hv, self._dirty, self._meta
        if (now, can_evict) != self._hv_key:
            # Values depend on age: recompute every head when time moves; within one request's
            # burst of evictions only the classes whose heap changed are looked at again.
            self._hv_key = (now, can_evict)
            dirty.update(range(len(heads)))
        requeued = False
        while True:
            for c in dirty:
                heads[c] = self._head(c, now, can_evict)
            dirty.clear()
            live = [h for h in heads if h is not None]
            if not live:
                if requeued or not meta_of:
                    return None
                for k, m in meta_of.items():  # nothing queued is evictable (rare): requeue all, retry once
                    self._push(k, m)
                requeued = True
                continue
            best = self._choose(live)
            key = best[3]
            meta = meta_of.get(key)
            if meta is not None and meta[4] == best[2] and (can_evict is None or can_evict(key)):
                break
            dirty.add(best[4])  # the cached head went stale since: look at its class again
        del meta_of[key]
        heapq.heappop(self._heaps[best[4]])
        dirty.add(best[4])
        self._ghost[key] = (meta[0], meta[1], meta[2], now)
        return key

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object`` by the compiled loop (native/ctxcache_replay_prefix.c) for a fresh
        instance, no index attached (same misses, same state); else the reference loop."""
        ok = self._fresh() and self.clock is clock and type(self.update_every) is int
        if ok and self.fused_ok(PrefixAware, *_INLINED):
            names = ("max_count", "freq_half_life", "new_edges", "shared_count", "cost_weight", "horizon", "margin",
                     "ghost_factor", "prior", "update_every", "decay", "warmup")  # fmt: skip
            params, seq0 = tuple(getattr(self, k) for k in names), next(self._seq)
            args = (capacity, params, len(self._heaps), _MID, seq0, self._meta, self._ghost)
            out, requests = native_replay("prefix_aware", requests, clock, *args)
            self._seq = itertools.count(seq0 if out is None else out[1][10])
            if out is not None:
                misses, state = out
                self._hist, self._unused, self._hd, self._events, self._learned, self._tau = state[:6]
                self._ins_n, self._ins_t0, self._ins_last, self._heaps, _, self._hv, dirty, hv_time = state[6:]
                self._dirty, self._hv_key = set(dirty), (hv_time, None)
                return int(misses)
        return super().replay_object(requests, capacity, clock)

    def _fresh(self) -> bool:
        used = bool(self._meta or self._ghost or self._pending or self._dirty or self._events or self._ins_n)
        used = used or any(self._heaps) or any(self._hv) or self._tau != 0 or self._index is not None
        return not used and math.isnan(self._ins_t0) and self._hv_key[0] == -math.inf

    def __len__(self) -> int:
        return len(self._meta)

    def __contains__(self, key: object) -> bool:
        return key in self._meta
