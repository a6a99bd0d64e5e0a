"""2Q, the full version (Johnson & Shasha, VLDB 1994): a FIFO for first-timers, an LRU for proven keys.

New keys enter A1in, a FIFO of about Kin = int(0.25*C) keys whose hits change nothing (a burst of
uses right after the first counts once). When A1in is over Kin it gives up its oldest key, whose id
is remembered in A1out, a ghost FIFO of Kout = int(0.5*C) ids; otherwise the victim is Am's least
recently used key. A miss whose id is still in A1out has been re-used at a distance the cache
could not hold as a first-timer, so the key goes straight into Am, the LRU of proven keys.

These are libCacheSim's TwoQ defaults and semantics (its miss counts are reproduced in object
semantics): the limits are checked on occupancy, so A1in may exceed Kin until Am holds anything.
(Below C = 4, where Kin = 0, libCacheSim caches nothing; here A1in then acts as a plain FIFO.)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, ClassVar

from ..errors import ConfigError
from .base import CanEvict, Key, Policy
from .registry import register
from .replay import native_replay


@register
class TwoQ(Policy):
    name = "2q"
    needs_capacity: ClassVar[bool] = True

    def __init__(self, capacity: int | None = None, in_ratio: float = 0.25, out_ratio: float = 0.5, **kw: Any) -> None:
        super().__init__(**kw)
        if capacity is not None and capacity < 1:
            raise ConfigError(f"2q: capacity must be >= 1, got {capacity!r}")
        if not (0.0 <= in_ratio <= 1.0 and out_ratio >= 0.0):
            raise ConfigError(f"2q: need 0 <= in_ratio <= 1 and out_ratio >= 0, got {in_ratio!r}, {out_ratio!r}")
        self.capacity = capacity
        self.in_ratio = float(in_ratio)
        self.out_ratio = float(out_ratio)
        self._ain: OrderedDict[Key, None] = OrderedDict()  # oldest first
        self._aout: OrderedDict[Key, None] = OrderedDict()  # ghost ids, oldest first
        self._am: OrderedDict[Key, None] = OrderedDict()  # LRU first
        self._peak = 0  # most keys ever resident: the capacity when none was given
        self._set_limits()

    def params(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "in_ratio": self.in_ratio, "out_ratio": self.out_ratio}

    def _set_limits(self) -> None:
        c = self.capacity if self.capacity is not None else max(1, self._peak)
        self._kin = int(self.in_ratio * c)
        self._kout = int(self.out_ratio * c)

    def __len__(self) -> int:
        return len(self._ain) + len(self._am)

    def __contains__(self, key: object) -> bool:
        return key in self._ain or key in self._am

    def on_insert(self, key: Key) -> None:
        if self.capacity is None and len(self) >= self._peak:
            self._peak = len(self) + 1
            self._set_limits()
        aout = self._aout
        if key in aout:
            del aout[key]
            self._am[key] = None
        else:
            self._ain[key] = None
        while len(aout) > self._kout:
            aout.popitem(last=False)

    def on_hit(self, key: Key) -> None:
        if key in self._am:
            self._am.move_to_end(key)

    def on_remove(self, key: Key) -> None:
        self._ain.pop(key, None)
        self._am.pop(key, None)

    def _order(self) -> tuple[OrderedDict[Key, None], OrderedDict[Key, None]]:
        """(queue the victim comes from, fallback queue)."""
        if len(self._ain) > self._kin or not self._am:
            return self._ain, self._am
        return self._am, self._ain

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        for q in self._order():
            for key in q:
                if can_evict is None or can_evict(key):
                    return key
        return None

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        first = self._order()[0]
        if can_evict is None:
            if not first:
                return None
            key, from_ain = first.popitem(last=False)[0], first is self._ain
        else:
            found = self._pop_allowed(first, can_evict)
            if found is None:
                return None
            key, from_ain = found
        if from_ain and self._kout > 0:
            # Trimmed to Kout in on_insert, after the incoming key had its chance to be found:
            # the algorithm looks the missed key up in A1out before it makes room.
            aout = self._aout
            aout[key] = None
            while len(aout) > self._kout + 1:
                aout.popitem(last=False)
        return key

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s loop with this class's methods inlined (same misses, same state)."""
        if self.capacity is None or not self.fused_ok(TwoQ, "_order", "_pop_allowed", "_set_limits"):
            return super().replay_object(requests, capacity, clock)
        if not (self._ain or self._aout or self._am):  # fresh: the compiled loop, when built
            args = (capacity, self._kin, self._kout, self._ain, self._aout, self._am)
            misses, requests = native_replay("2q", requests, clock, *args)
            if misses is not None:
                return int(misses)
        ain, aout, am = self._ain, self._aout, self._am
        kin, kout = self._kin, self._kout
        kout1 = kout + 1
        am_move, ain_pop, am_pop, aout_pop = am.move_to_end, ain.popitem, am.popitem, aout.popitem
        misses = resident = 0
        for r in requests:
            clock.t = r.time
            for b in r.blocks:
                if b in am:
                    am_move(b)
                    continue
                if b in ain:  # A1in ignores hits
                    continue
                misses += 1
                if resident >= capacity:
                    if len(ain) > kin or not am:  # evict(None): A1in's oldest, its id to A1out
                        if ain:
                            key = ain_pop(False)[0]
                            if kout > 0:
                                aout[key] = None
                                while len(aout) > kout1:
                                    aout_pop(False)
                    else:
                        am_pop(False)
                else:
                    resident += 1
                if b in aout:
                    del aout[b]
                    am[b] = None
                else:
                    ain[b] = None
                while len(aout) > kout:
                    aout_pop(False)
        return misses

    def _pop_allowed(self, first: OrderedDict[Key, None], can_evict: CanEvict) -> tuple[Key, bool] | None:
        """Pop the first allowed key, ``first`` queue before the other; True if it was in A1in.

        A refused key is in use. In Am it goes to the MRU end; in A1in to the back (A1in ignores
        hits), and if all of A1in refuses, its keys are in use by others and move to Am's MRU end,
        so a full A1in is not asked again on the next call. No key is asked twice in one call.
        """
        assert can_evict is not None
        ain, am = self._ain, self._am
        for q in (ain, am) if first is ain else (am, ain):
            for _ in range(len(q)):
                key = next(iter(q))
                if can_evict(key):
                    del q[key]
                    return key, q is ain
                q.move_to_end(key)
            if q is ain:
                am.update(ain)
                ain.clear()
        return None
