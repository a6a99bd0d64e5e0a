"""LRU: evict the least recently used key."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from .base import Key, OrderedPolicy
from .registry import register


@register
class LRU(OrderedPolicy):
    name = "lru"

    def on_hit(self, key: Key) -> None:
        self._order.move_to_end(key)

    def on_hits(self, keys: Iterable[Key]) -> None:
        deque(map(self._order.move_to_end, keys), maxlen=0)  # the loop runs in C
