"""ARC (Megiddo & Modha, FAST 2003): recency list T1 and frequency list T2, each with a ghost list.

T1 holds keys used once since they came in, T2 keys used again; B1 and B2 remember the ids last
evicted from each. A miss that finds its id in B1 means T1 was too small, so the target size p of
T1 grows (by max(|B2|/|B1|, 1)); a B2 ghost hit shrinks it. REPLACE takes T1's LRU key when
|T1| > p (or == p on a B2 ghost hit) or when T2 is empty, else T2's. p starts at 0, as in
libCacheSim's ARC, whose miss counts this class reproduces in object semantics.

The paper adapts p and picks the victim knowing the missed key x; here the owner calls ``evict``
before ``on_insert(x)``. ``__contains__`` therefore remembers the last key it reported missing:
``evict`` uses it to adapt p before choosing, exactly as the paper does when the owner asks
``key in policy`` before making room (the simulator does). Without that hint (prefix semantics,
the live cache), p adapts in ``on_insert`` instead, one replacement late; a key asked about but
never inserted can move p once. Ghost lists are trimmed in ``on_insert`` (|T1|+|B1| <= c,
total <= 2c), which gives the paper's case IV lists. Without a capacity, c is the most keys ever
resident. A key ``can_evict`` refuses is in use, so it counts as a hit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, ClassVar

from ..errors import ConfigError
from .base import CanEvict, Key, Policy
from .registry import register
from .replay import native_replay

_NONE: Any = object()


@register
class ARC(Policy):
    name = "arc"
    needs_capacity: ClassVar[bool] = True

    def __init__(self, capacity: int | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        if capacity is not None and capacity < 1:
            raise ConfigError(f"arc: capacity must be >= 1, got {capacity!r}")
        self.capacity = capacity
        self.p = 0.0
        self._t1: OrderedDict[Key, None] = OrderedDict()  # LRU first
        self._t2: OrderedDict[Key, None] = OrderedDict()
        self._b1: OrderedDict[Key, None] = OrderedDict()
        self._b2: OrderedDict[Key, None] = OrderedDict()
        self._c = capacity if capacity is not None else 1  # without one: most keys ever resident
        self._probe: Any = _NONE  # last key __contains__ found missing
        self._adapted: Any = _NONE  # ghost key whose hit already moved p

    def params(self) -> dict[str, Any]:
        return {"capacity": self.capacity}

    def __len__(self) -> int:
        return len(self._t1) + len(self._t2)

    def __contains__(self, key: object) -> bool:
        if key in self._t1 or key in self._t2:
            return True
        self._probe = key
        return False

    def _adapt(self, key: Key) -> None:
        """Move p for a ghost hit on ``key``: a B1 hit asks for a bigger T1, a B2 hit for a smaller one."""
        nb1, nb2 = len(self._b1), len(self._b2)
        if key in self._b1:
            self.p = min(self.p + max(nb2 / nb1, 1.0), float(self._c))
        elif key in self._b2:
            self.p = max(self.p - max(nb1 / nb2, 1.0), 0.0)

    def _probe_in_b2(self) -> bool:
        """Adapt p for the pending miss, once, before its replacement; True for a B2 ghost hit."""
        x = self._probe  # reset by on_insert, so never a resident key
        if x is _NONE:
            return False
        if self._adapted is not x:
            if x not in self._b1 and x not in self._b2:
                return False
            self._adapted = x
            self._adapt(x)
        return x in self._b2

    def on_insert(self, key: Key) -> None:
        t1, t2, b1, b2 = self._t1, self._t2, self._b1, self._b2
        if self.capacity is None and len(t1) + len(t2) >= self._c:
            self._c = len(t1) + len(t2) + 1
        if key in b1 or key in b2:
            if self._adapted is not key:
                self._adapt(key)
            b1.pop(key, None)
            b2.pop(key, None)
            t2[key] = None
        else:
            t1[key] = None
            c = self._c
            n1 = len(t1) + len(b1)
            if n1 > c:
                if b1:
                    b1.popitem(last=False)
            elif n1 + len(t2) + len(b2) > 2 * c and b2:
                b2.popitem(last=False)
        self._probe = self._adapted = _NONE

    def on_hit(self, key: Key) -> None:
        if key in self._t1:
            del self._t1[key]
            self._t2[key] = None
        else:
            self._t2.move_to_end(key)

    def on_remove(self, key: Key) -> None:
        self._t1.pop(key, None)
        self._t2.pop(key, None)

    def _order(self, in_b2: bool) -> tuple[OrderedDict[Key, None], OrderedDict[Key, None]]:
        """(list REPLACE takes from, the other one); ``evict`` inlines this."""
        t1, t2 = self._t1, self._t2
        n1 = len(t1)
        if n1 and (n1 > self.p or (n1 == self.p and in_b2) or not t2):
            return t1, t2
        return t2, t1

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        saved = self.p, self._adapted
        try:
            first, second = self._order(self._probe_in_b2())
        finally:
            self.p, self._adapted = saved
        for lst in (first, second):
            for key in lst:
                if can_evict is None or can_evict(key):
                    return key
        return None

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s loop with this class's methods inlined (same misses, same state).
        The reference loop asks ``key in policy`` before ``evict``, so p adapts to a ghost hit on
        the missed key before the replacement when the cache is full, and in ``on_insert``
        (nothing evicted in between) when it is not: here it adapts at the miss, in both cases."""
        inlined = ("_adapt", "_probe_in_b2", "_order")
        if self.capacity is None or self._probe is not _NONE or not self.fused_ok(ARC, *inlined):
            return super().replay_object(requests, capacity, clock)
        t1, t2, b1, b2 = self._t1, self._t2, self._b1, self._b2
        if not (t1 or t2 or b1 or b2):  # fresh: the compiled loop, when built
            out, requests = native_replay("arc", requests, clock, capacity, self._c, self.p, t1, t2, b1, b2)
            if out is not None:
                misses, self.p = out
                return int(misses)
        return self._replay_fused(requests, capacity, clock)

    def _replay_fused(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``replay_object``'s Python loop (without the compiled one, or over a used instance)."""
        t1, t2, b1, b2 = self._t1, self._t2, self._b1, self._b2
        c, p = self._c, self.p
        fc, c2 = float(c), 2 * c
        t2_move, t1_pop, t2_pop, b1_pop, b2_pop = t2.move_to_end, t1.popitem, t2.popitem, b1.popitem, b2.popitem
        misses = resident = 0
        try:
            for r in requests:
                clock.t = r.time
                for b in r.blocks:
                    if b in t1:
                        del t1[b]
                        t2[b] = None
                        continue
                    if b in t2:
                        t2_move(b)
                        continue
                    misses += 1
                    in_b2 = False
                    if b in b1:
                        nb1 = len(b1)
                        p = min(p + max(len(b2) / nb1, 1.0), fc)
                        ghost = True
                    elif b in b2:
                        nb2 = len(b2)
                        p = max(p - max(len(b1) / nb2, 1.0), 0.0)
                        ghost = in_b2 = True
                    else:
                        ghost = False
                    if resident >= capacity:
                        n1 = len(t1)
                        if n1 and (n1 > p or (n1 == p and in_b2) or not t2):
                            b1[t1_pop(False)[0]] = None
                        elif t2:
                            b2[t2_pop(False)[0]] = None
                    else:
                        resident += 1
                    if ghost:
                        b1.pop(b, None)
                        b2.pop(b, None)
                        t2[b] = None
                    else:
                        t1[b] = None
                        n1 = len(t1) + len(b1)
                        if n1 > c:
                            if b1:
                                b1_pop(False)
                        elif n1 + len(t2) + len(b2) > c2 and b2:
                            b2_pop(False)
        finally:
            self.p = p
            self._adapted = _NONE
        return misses

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        t1, t2 = self._t1, self._t2
        in_b2 = self._probe is not _NONE and self._probe_in_b2()
        n1 = len(t1)
        from_t1 = n1 > 0 and (n1 > self.p or (n1 == self.p and in_b2) or not t2)
        if can_evict is None:
            if from_t1:
                key = t1.popitem(last=False)[0]
                self._b1[key] = None
            elif t2:
                key = t2.popitem(last=False)[0]
                self._b2[key] = None
            else:
                return None
            return key
        # A refused key is in use: it counts as used again (T1 -> T2's MRU end, T2 -> its MRU end),
        # so it is not asked again before the rest of T2, and repeated refusals stay O(1) amortized.
        for lst in (t1, t2) if from_t1 else (t2, t1):
            for _ in range(len(lst)):
                key = next(iter(lst))
                if can_evict(key):
                    del lst[key]
                    (self._b1 if lst is t1 else self._b2)[key] = None
                    return key
                del lst[key]
                t2[key] = None
        return None
