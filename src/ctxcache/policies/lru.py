"""LRU: evict the least recently used key."""

from __future__ import annotations

from collections.abc import Iterable

from .base import Key, OrderedPolicy
from .registry import register


@register
class LRU(OrderedPolicy):
    name = "lru"

    def on_hit(self, key: Key) -> None:
        self._to_back(key)

    def on_hits(self, keys: Iterable[Key]) -> None:
        shards, tick = self._shards, self._tick
        for key in keys:
            od = shards[(key[-4] << 2 | key[-5] & 3) if key.__class__ is bytes and len(key) > 4 else hash(key) % 1021]
            del od[key]  # a dict keeps insertion order: re-inserted, the key is at the back
            od[key] = next(tick)
