"""Belady's MIN: evict the key whose next use is furthest in the future (offline oracle).

Simulator only: it needs the future. The simulator calls ``set_future(next_use)`` with, for each
access position, the position of the same block's next access, and sets ``position`` before each
hit or insert. Without a future every key looks unused again, and ties go to the oldest entry.
A missed key is always admitted (demand paging), as in libCacheSim's Belady.

A key ``can_evict`` refuses is in use (a parent of live blocks, or pinned). Its next use is still
what the future says, so it is not rescored: it is set aside, off the heap, until the radix index
(``attach``) reports it evictable again, or until nothing else may go (or ``can_evict`` is None),
when every key set aside is put back. So MIN is kept over the keys that may go, and a key in use
is asked once, not on every call.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np

from .base import CanEvict, Key, ScoredPolicy
from .registry import register
from .replay import native_replay

_NEVER = float(np.iinfo(np.int64).max)
_M40, _S80 = (1 << 40) - 1, 1 << 80


@register
class Belady(ScoredPolicy):
    name = "belady"
    offline = True

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.position = 0
        self._future: list[int] | None = None
        # Refused keys: key -> its heap entry's (score, seq). An entry whose seq is no longer the
        # key's (hit, or removed and inserted again since) is stale and dropped when met.
        self._aside: dict[Key, tuple[float, int]] = {}

    def set_future(self, next_use: np.ndarray) -> None:
        self._future = next_use.tolist()

    def _score(self, key: Key, hit: bool) -> float:
        if self._future is None:
            return -_NEVER
        return -float(self._future[self.position])

    def on_insert(self, key: Key) -> None:
        # The simulator's hot path (one call per access): ScoredPolicy._push, inlined.
        seq = next(self._seq)
        self._entry[key] = seq
        heapq.heappush(self._heap, (-self._future[self.position] if self._future is not None else -_NEVER, seq, key))
        if len(self._heap) > 2 * len(self._entry) + 64:
            self._heap = [e for e in self._heap if self._entry.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

    on_hit = on_insert

    def on_remove(self, key: Key) -> None:
        self._aside.pop(key, None)
        super().on_remove(key)

    def attach(self, index: Any) -> None:
        index.watch(self._on_evictable)

    def _on_evictable(self, key: Key, evictable: bool) -> None:
        if evictable and self._aside:
            item = self._aside.pop(key, None)
            if item is not None and self._entry.get(key) == item[1]:
                heapq.heappush(self._heap, (item[0], item[1], key))

    def _put_back(self) -> None:
        entry, heap = self._entry, self._heap
        for key, (score, seq) in self._aside.items():
            if entry.get(key) == seq:
                heapq.heappush(heap, (score, seq, key))
        self._aside.clear()

    def _take(self, can_evict: CanEvict) -> Key | None:
        heap, entry, aside = self._heap, self._entry, self._aside
        while heap:
            score, seq, key = heapq.heappop(heap)
            if entry.get(key) != seq:
                continue  # stale: the key was touched or removed since
            if can_evict is None or can_evict(key):
                del entry[key]
                return key
            aside[key] = (score, seq)
        return None

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        if can_evict is None and self._aside:
            self._put_back()
        key = self._take(can_evict)
        if key is None and self._aside:
            self._put_back()
            key = self._take(can_evict)
        return key

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s offline loop with ``on_hit``/``on_insert``/``evict`` inlined
        (same misses, same state): in object semantics nothing is refused, so nothing is set aside.

        While it runs, each heap entry ``(score, seq, key)`` is one int, score * 2**80 + seq * 2**40
        + key, which orders as the tuple does (seqs are unique, so keys never decide): the heap makes
        the same moves with int comparisons in place of tuple ones (heappop was the largest cost),
        and is turned back into tuples, in place, at the end. Keys must be ints in [0, 2**40) and the
        entries' seqs below 2**40; otherwise this falls back to the reference loop."""
        fut = self._future
        if fut is None or self._aside or not self.fused_ok(Belady, "_score", "_forget", "_take", "_put_back"):
            return super().replay_object(requests, capacity, clock)
        if not (self._entry or self._heap):  # fresh: the compiled loop, when built
            seq0 = next(self._seq)
            out, requests = native_replay("belady", requests, clock, capacity, fut, seq0, self._entry)
            self._seq = itertools.count(seq0 if out is None else out[2])
            if out is not None:
                misses, self._heap, _, n = out
                if n:
                    self.position = n - 1
                return int(misses)
        reqs = requests if isinstance(requests, list) else list(requests)
        keys = list(itertools.chain(self._entry, itertools.chain.from_iterable(r.blocks for r in reqs)))
        seq0 = next(self._seq)
        self._seq = itertools.count(seq0)
        if keys and (set(map(type, keys)) != {int} or min(keys) < 0 or max(keys) > _M40):
            return super().replay_object(reqs, capacity, clock)
        if seq0 + len(keys) > _M40 or any(type(e[0]) is not int for e in self._heap):
            return super().replay_object(reqs, capacity, clock)
        entry, nxt = self._entry, self._seq.__next__
        heap: list[int] = [int(s) * _S80 + (q << 40) + k for s, q, k in self._heap]  # type: ignore[operator]  # in place: still a heap
        push, pop = heapq.heappush, heapq.heappop
        misses = resident = i = 0
        try:
            for r in reqs:
                clock.t = r.time
                for b in r.blocks:
                    if b not in entry:
                        misses += 1
                        if resident >= capacity:
                            while heap:  # the furthest next use; stale entries dropped
                                x = pop(heap)
                                k = x & _M40
                                if entry.get(k) == (x >> 40) & _M40:
                                    del entry[k]
                                    break
                        else:
                            resident += 1
                    seq = nxt()
                    entry[b] = seq
                    push(heap, (seq << 40) + b - fut[i] * _S80)
                    i += 1
                    if len(heap) > 2 * len(entry) + 64:
                        heap = [x for x in heap if entry.get(x & _M40) == (x >> 40) & _M40]
                        heapq.heapify(heap)
        finally:
            self._heap = [(x >> 80, (x >> 40) & _M40, x & _M40) for x in heap]  # type: ignore[misc]
            if i:
                self.position = i - 1
        return misses

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        entry = self._entry
        aside = sorted((s, q, k) for k, (s, q) in self._aside.items() if entry.get(k) == q)
        key = self._find(can_evict, pop=False)  # drops stale entries on top: heap[0] is key's
        if can_evict is None:  # evict puts every key set aside back first
            tops = aside[:1] + self._heap[:1] if key is not None else aside[:1]
            return min(tops)[2] if tops else None
        if key is not None:
            return key
        return next((k for _, _, k in aside if can_evict(k)), None)
