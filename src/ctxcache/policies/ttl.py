"""TTL: every key expires ``ttl`` seconds after its last use (or after its insert, with
``refresh_on_hit=False``); the victim is the key that expires soonest, so expired keys go first,
in expiry order. ``expired()`` lists the keys whose time has passed, for owners that drop them
proactively.

With one TTL for all keys, expiry order is the order of the last refresh, so an insertion-ordered
dict holds the keys sorted by expiry and every operation is O(1). Time is taken from the injected
clock and never runs backwards here: a clock that steps back is read as standing still, which
keeps that order valid.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from .base import CanEvict, Key, Policy
from .registry import register


@register
class TTL(Policy):
    name = "ttl"

    def __init__(self, ttl: float = 300.0, refresh_on_hit: bool = True, **kw: Any) -> None:
        super().__init__(**kw)
        if not ttl > 0:
            raise ConfigError(f"ttl: ttl must be > 0 seconds, got {ttl!r}")
        self.ttl = float(ttl)
        self.refresh_on_hit = bool(refresh_on_hit)
        self._exp: OrderedDict[Key, float] = OrderedDict()  # key -> expiry time, soonest first
        self._now = float("-inf")

    def params(self) -> dict[str, Any]:
        return {"ttl": self.ttl, "refresh_on_hit": self.refresh_on_hit}

    def _time(self) -> float:
        now = self.clock()
        if now > self._now:
            self._now = now
        return self._now

    def _refresh(self, key: Key) -> None:
        exp = self._exp
        exp[key] = self._time() + self.ttl
        exp.move_to_end(key)

    def on_insert(self, key: Key) -> None:
        self._refresh(key)

    def on_hit(self, key: Key) -> None:
        if self.refresh_on_hit and key in self._exp:
            self._refresh(key)

    def on_remove(self, key: Key) -> None:
        self._exp.pop(key, None)

    def __len__(self) -> int:
        return len(self._exp)

    def __contains__(self, key: object) -> bool:
        return key in self._exp

    def expires_at(self, key: Key) -> float | None:
        """When a resident key expires (None if it is not resident)."""
        return self._exp.get(key)

    def expired(self, now: float | None = None) -> list[Key]:
        """Resident keys whose expiry is at or before ``now`` (default: the clock), soonest first."""
        t = self._time() if now is None else now
        out = []
        for key, when in self._exp.items():
            if when > t:
                break
            out.append(key)
        return out

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s loop with this class's methods inlined (same misses, same state)."""
        if not self.fused_ok(TTL, "_refresh", "_time"):
            return super().replay_object(requests, capacity, clock)
        exp, ttl, refresh = self._exp, self.ttl, self.refresh_on_hit
        move, pop = exp.move_to_end, exp.popitem
        now = self._now
        misses = resident = 0
        for r in requests:
            t = clock.t = r.time
            tn = t if t > now else now  # _time(): a clock that steps back reads as standing still
            e = tn + ttl
            for b in r.blocks:
                if b in exp:
                    if refresh:
                        now = tn
                        exp[b] = e
                        move(b)
                    continue
                misses += 1
                if resident >= capacity:
                    if exp:
                        pop(False)
                else:
                    resident += 1
                now = tn
                exp[b] = e  # a new key lands at the back: no move
        self._now = now
        return misses

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        for key in self._exp:
            if can_evict is None or can_evict(key):
                return key
        return None

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        exp = self._exp
        if can_evict is None:
            return exp.popitem(last=False)[0] if exp else None
        # A refused key is in use (pinned, or a parent of live blocks): its clock restarts, as on a
        # hit, so it is not examined again on every call while it stays in use.
        for _ in range(len(exp)):
            key = next(iter(exp))
            if can_evict(key):
                del exp[key]
                return key
            self._refresh(key)
        return None
