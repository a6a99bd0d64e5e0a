"""Belady's MIN: evict the key whose next use is furthest in the future (offline oracle).

Simulator only: it needs the future. The simulator calls ``set_future(next_use)`` with, for each
access position, the position of the same block's next access, and sets ``position`` before each
hit or insert. Without a future every key looks unused again, and ties go to the oldest entry.
A missed key is always admitted (demand paging), as in libCacheSim's Belady.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from .base import Key, ScoredPolicy
from .registry import register

_NEVER = float(np.iinfo(np.int64).max)


@register
class Belady(ScoredPolicy):
    name = "belady"
    offline = True

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.position = 0
        self._future: list[int] | None = None

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
