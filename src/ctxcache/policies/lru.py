"""LRU: evict the least recently used key."""

from __future__ import annotations

from collections.abc import Iterable

from .base import Key, OrderedPolicy
from .registry import register


@register
class LRU(OrderedPolicy):
    name = "lru"
    _hit_moves = True

    def on_hit(self, key: Key) -> None:
        self._to_back(key)

    def on_hits(self, keys: Iterable[Key]) -> None:
        shards, tick = self._shards, self._tick
        try:
            for key in keys:
                od = shards[hash(key) % 1021]
                del od[key]  # a dict keeps insertion order: re-inserted, the key is at the back
                od[key] = tick
                tick += 1
        finally:  # a key that was not resident (KeyError) leaves the stamps given so far used
            self._tick = tick
