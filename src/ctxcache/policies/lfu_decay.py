"""LFU with exponential decay: value = hits * exp(-decay * seconds since last use).

All keys age by the same factor exp(-decay * dt), so the order by value never changes while keys
sit untouched; the heap key log(hits) + decay * last_use is that order without floating-point
overflow. ``decay`` is per second (default ln 2 / 600: a use is worth half after 10 minutes).
Hits accumulate with decay too: on each use, hits = hits * exp(-decay * dt) + 1.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError
from .base import Key, ScoredPolicy
from .registry import register


@register
class LFUDecay(ScoredPolicy):
    name = "lfu-decay"

    def __init__(self, decay: float = math.log(2) / 600.0, **kw: Any) -> None:
        super().__init__(**kw)
        if not decay >= 0:
            raise ConfigError(f"lfu-decay: decay must be >= 0 per second, got {decay!r}")
        self.decay = float(decay)
        self._state: dict[Key, tuple[float, float]] = {}  # key -> (decayed hits, last use)

    def params(self) -> dict[str, Any]:
        return {"decay": self.decay}

    def _score(self, key: Key, hit: bool) -> float:
        now = self.clock()
        hits = 1.0
        if hit and key in self._state:
            old, last = self._state[key]
            hits += old * math.exp(-self.decay * max(0.0, now - last))
        self._state[key] = (hits, now)
        return math.log(hits) + self.decay * now

    def _forget(self, key: Key) -> None:
        self._state.pop(key, None)

    def value(self, key: Key) -> float:
        """The current decayed hit count of a resident key."""
        hits, last = self._state[key]
        return hits * math.exp(-self.decay * max(0.0, self.clock() - last))
