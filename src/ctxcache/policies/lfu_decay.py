"""LFU with exponential decay: value = hits * exp(-decay * seconds since last use).

Hits accumulate with decay too: on each use, hits = hits * exp(-decay * dt) + 1. All keys age by
the same factor, so the order by value never changes while keys sit untouched, and a heap over a
time-invariant key works: we keep S = hits * exp(decay * (last use - t0)), which a use updates
as S += exp(decay * (now - t0)). The growth factor is computed once per clock value and the
epoch t0 moves forward (rescaling every S) before it could overflow. ``decay`` is per second
(default ln 2 / 600: a use is worth half after 10 minutes).

A key ``can_evict`` refuses is in use (pinned, or a parent of live blocks): ``evict`` counts the
refusal as a use (``ScoredPolicy._refused``'s default), as ARC, LIRS and TTL do, so the key moves
up past the keys it tied with or beat and is not asked again on every call while it stays in use.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from .base import Key, ScoredPolicy
from .registry import register
from .replay import native_replay

_REBASE = 600.0  # rebase when decay * (now - t0) exceeds this: e^600 is far from overflow


@register
class LFUDecay(ScoredPolicy):
    name = "lfu-decay"

    def __init__(self, decay: float = math.log(2) / 600.0, **kw: Any) -> None:
        super().__init__(**kw)
        if not decay >= 0:
            raise ConfigError(f"lfu-decay: decay must be >= 0 per second, got {decay!r}")
        self.decay = float(decay)
        self._s: dict[Key, float] = {}  # hits scaled to the epoch t0
        self._t0: float | None = None
        self._now = math.nan
        self._growth = 1.0

    def params(self) -> dict[str, Any]:
        return {"decay": self.decay}

    def _factor(self) -> float:
        now = self.clock()
        if now != self._now:
            if self._t0 is None:
                self._t0 = now
            elif self.decay * (now - self._t0) > _REBASE:
                self._rebase(now)
            self._now = now
            self._growth = math.exp(self.decay * (now - self._t0))
        return self._growth

    def _rebase(self, now: float) -> None:
        assert self._t0 is not None
        shrink = math.exp(-self.decay * (now - self._t0))
        self._t0 = now
        self._s = {k: v * shrink for k, v in self._s.items()}
        self._heap = [(self._s[k], seq, k) for _, seq, k in self._heap if self._entry.get(k) == seq]
        heapq.heapify(self._heap)

    def _score(self, key: Key, hit: bool) -> float:
        g = self._factor()
        s = self._s.get(key, 0.0) + g if hit else g
        self._s[key] = s
        return s

    def _forget(self, key: Key) -> None:
        self._s.pop(key, None)

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s loop with ``on_hit``/``on_insert``/``evict`` (ScoredPolicy's
        ``_push`` and ``_find``, this class's ``_score``) inlined: same misses, same state. The
        growth factor changes only with the clock, so ``_factor`` (which may rebase, replacing the
        heap and the scores) is called once per request, where the reference loop's first score of
        the request calls it: after that access's eviction."""
        if not self.fused_ok(LFUDecay, "_score", "_forget", "_push", "_find", "_factor", "_rebase", "_refused"):
            return super().replay_object(requests, capacity, clock)
        if not (self._entry or self._heap or self._s) and self.clock is clock:  # fresh: compiled, when built
            seq0 = next(self._seq)
            args = (capacity, self.decay, seq0, self._entry, self._s, self._t0, self._now, self._growth)
            out, requests = native_replay("lfu_decay", requests, clock, *args)
            self._seq = itertools.count(seq0 if out is None else out[2])
            if out is not None:
                misses, self._heap, _, self._t0, self._now, self._growth = out
                return int(misses)
        entry, nxt = self._entry, self._seq.__next__
        push, pop, heapify = heapq.heappush, heapq.heappop, heapq.heapify
        heap, sc, g = self._heap, self._s, self._growth
        misses = resident = 0
        for r in requests:
            t = clock.t = r.time
            stale = t != self._now  # the first score of this request calls _factor
            for b in r.blocks:
                if b not in entry:
                    misses += 1
                    if resident >= capacity:
                        while heap:  # evict(None): the lowest live entry; stale ones dropped
                            item = pop(heap)
                            k = item[2]
                            if entry.get(k) == item[1]:
                                del entry[k]
                                sc.pop(k, None)
                                break
                    else:
                        resident += 1
                    if stale:
                        g = self._factor()
                        heap, sc, stale = self._heap, self._s, False
                    v = g
                else:
                    if stale:
                        g = self._factor()
                        heap, sc, stale = self._heap, self._s, False
                    v = sc.get(b, 0.0) + g
                sc[b] = v
                seq = nxt()
                entry[b] = seq
                push(heap, (v, seq, b))
                if len(heap) > 2 * len(entry) + 64:
                    heap = [e for e in heap if entry.get(e[2]) == e[1]]
                    heapify(heap)
                    self._heap = heap
        return misses

    def value(self, key: Key) -> float:
        """The current decayed hit count of a resident key."""
        return self._s[key] / self._factor()
