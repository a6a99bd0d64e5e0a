"""LRU: evict the least recently used key."""

from __future__ import annotations

from .base import Key, OrderedPolicy
from .registry import register


@register
class LRU(OrderedPolicy):
    name = "lru"

    def on_hit(self, key: Key) -> None:
        self._order.move_to_end(key)
