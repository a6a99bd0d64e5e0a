"""FIFO: evict the oldest insert; hits change nothing."""

from __future__ import annotations

from .base import Key, OrderedPolicy
from .registry import register


@register
class FIFO(OrderedPolicy):
    name = "fifo"
    _hit_moves = False

    def on_hit(self, key: Key) -> None:
        pass
