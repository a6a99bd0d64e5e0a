"""LFU: evict the key with the fewest uses; ties go to the least recently used.

Counts start at 1 on insert and are forgotten on eviction (no history of evicted keys).
"""

from __future__ import annotations

from .base import Key, ScoredPolicy
from .registry import register


@register
class LFU(ScoredPolicy):
    name = "lfu"

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._count: dict[Key, int] = {}

    def _score(self, key: Key, hit: bool) -> float:
        n = self._count.get(key, 0) + 1 if hit else 1
        self._count[key] = n
        return n

    def _forget(self, key: Key) -> None:
        self._count.pop(key, None)
