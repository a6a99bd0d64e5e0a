"""LIRS (Jiang & Zhang, SIGMETRICS 2002): rank keys by reuse distance, not by recency alone.

Most of the cache holds LIR keys (short reuse distance); a small queue Q holds resident HIR keys,
and victims come from Q's front. The stack S orders keys by last use, down to the oldest LIR key
(pruning keeps an LIR key at the bottom); an HIR key re-used while still in S has a reuse distance
shorter than the oldest LIR key's, so it becomes LIR and that oldest LIR key drops to Q. S keeps
non-resident HIR entries (ids only) for that test.

Parameters follow libCacheSim's LIRS, whose miss counts this class reproduces in object semantics:
HIR ratio 0.01 (hirs = max(1, int(0.01*C)), the LIR set holds C - hirs keys); S is capped at 2*C
entries by dropping the oldest non-resident entries; and a hit on a resident HIR key that is no
longer in S first demotes the bottom LIR key when the LIR set is full, then re-enters S as HIR.
Keys become LIR on a miss while the LIR set is not yet full (warm-up).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, ClassVar

from ..errors import ConfigError
from .base import CanEvict, Key, Policy
from .registry import register
from .replay import native_replay

LIR, HIR = 0, 1


@register
class LIRS(Policy):
    name = "lirs"
    needs_capacity: ClassVar[bool] = True

    def __init__(self, capacity: int | None = None, hir_ratio: float = 0.01, **kw: Any) -> None:
        super().__init__(**kw)
        if capacity is not None and capacity < 1:
            raise ConfigError(f"lirs: capacity must be >= 1, got {capacity!r}")
        if not 0.0 <= hir_ratio < 1.0:
            raise ConfigError(f"lirs: hir_ratio must be in [0, 1), got {hir_ratio!r}")
        self.capacity = capacity
        self.hir_ratio = float(hir_ratio)
        self._s: OrderedDict[Key, None] = OrderedDict()  # the stack, bottom (oldest) first
        self._q: OrderedDict[Key, None] = OrderedDict()  # resident HIR keys, victim first
        self._nh: OrderedDict[Key, None] = OrderedDict()  # non-resident keys still in S, oldest first
        self._status: dict[Key, int] = {}  # resident keys -> LIR or HIR
        self._lirs = 0
        self._peak = 0  # most keys ever resident: the capacity when none was given
        self._set_limits()

    def params(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "hir_ratio": self.hir_ratio}

    def _set_limits(self) -> None:
        c = self.capacity if self.capacity is not None else max(1, self._peak)
        self._lir_limit = c - max(1, int(self.hir_ratio * c))
        self._s_limit = 2 * c

    def __len__(self) -> int:
        return len(self._status)

    def __contains__(self, key: object) -> bool:
        return key in self._status

    def _prune(self) -> None:
        """Drop HIR entries from the bottom of S until an LIR key is there."""
        if not self._lirs:
            return  # nothing to anchor the bottom; pruned once an LIR key appears
        s, status, nh = self._s, self._status, self._nh
        while s:
            key = next(iter(s))
            if status.get(key) == LIR:
                return
            del s[key]
            nh.pop(key, None)

    def _demote_bottom(self) -> None:
        """The oldest LIR key becomes resident HIR at the back of Q."""
        if not self._lirs:
            return
        key = self._s.popitem(last=False)[0]  # pruning keeps an LIR key at the bottom
        self._status[key] = HIR
        self._lirs -= 1
        self._q[key] = None
        self._prune()

    def on_insert(self, key: Key) -> None:
        status, s, nh = self._status, self._s, self._nh
        if self.capacity is None and len(status) >= self._peak:
            self._peak = len(status) + 1
            self._set_limits()
        if key in nh:
            # Re-used within the stack: a shorter reuse distance than the oldest LIR key's.
            del nh[key]
            s.move_to_end(key)
            status[key] = LIR
            self._lirs += 1
            self._prune()
            if self._lirs > self._lir_limit:
                self._demote_bottom()
        elif self._lirs < self._lir_limit:
            s[key] = None
            status[key] = LIR
            self._lirs += 1
            self._prune()
        else:
            s[key] = None
            status[key] = HIR
            self._q[key] = None
        while len(s) > self._s_limit and nh:
            del s[nh.popitem(last=False)[0]]  # never the bottom, which is LIR: no pruning needed

    def on_hit(self, key: Key) -> None:
        s = self._s
        if self._status[key] == LIR:
            if next(iter(s)) == key:
                s.move_to_end(key)
                self._prune()
            else:
                s.move_to_end(key)
        elif key in s:
            s.move_to_end(key)
            del self._q[key]
            self._status[key] = LIR
            self._lirs += 1
            self._prune()
            if self._lirs > self._lir_limit:
                self._demote_bottom()
        else:
            if self._lirs >= self._lir_limit:
                self._demote_bottom()
            s[key] = None
            self._q.move_to_end(key)
            nh = self._nh
            while len(s) > self._s_limit and nh:
                del s[nh.popitem(last=False)[0]]

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s loop with the common steps inlined (same misses, same state):
        a hit on an LIR key above the bottom of S, an eviction from Q and the insert of an HIR key
        once the LIR set is full; the other steps call the methods."""
        if self.capacity is None or not self.fused_ok(LIRS, "_prune", "_demote_bottom", "_evict_lir", "_set_limits"):
            return super().replay_object(requests, capacity, clock)
        s, q, nh, status = self._s, self._q, self._nh, self._status
        if not (s or q or nh or status or self._lirs):  # fresh: the compiled loop, when built
            args = (capacity, self._lir_limit, self._s_limit, s, q, nh, status)
            out, requests = native_replay("lirs", requests, clock, *args)
            if out is not None:
                misses, self._lirs = out
                return int(misses)
        lir_limit, s_limit = self._lir_limit, self._s_limit
        s_move, q_pop, nh_pop = s.move_to_end, q.popitem, nh.popitem
        on_hit, on_insert = self.on_hit, self.on_insert
        get = status.get
        misses = resident = 0
        for r in requests:
            clock.t = r.time
            for b in r.blocks:
                st = get(b)
                if st is not None:
                    if st == LIR and next(iter(s)) != b:
                        s_move(b)
                    else:
                        on_hit(b)
                    continue
                misses += 1
                if resident >= capacity:
                    if q:
                        key = q_pop(False)[0]
                        del status[key]
                        if key in s:
                            nh[key] = None
                    else:
                        self._evict_lir(None)
                else:
                    resident += 1
                if b in nh or self._lirs < lir_limit:
                    on_insert(b)
                    continue
                s[b] = None
                status[b] = HIR
                q[b] = None
                while len(s) > s_limit and nh:
                    del s[nh_pop(False)[0]]
        return misses

    def on_remove(self, key: Key) -> None:
        st = self._status.pop(key, None)
        if st is None:
            return
        self._s.pop(key, None)
        if st == LIR:
            self._lirs -= 1
            self._prune()
        else:
            del self._q[key]

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        for key in self._q:
            if can_evict is None or can_evict(key):
                return key
        status = self._status
        for key in self._s:
            if status.get(key) == LIR and (can_evict is None or can_evict(key)):
                return key
        return None

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        q = self._q
        if can_evict is None:
            if not q:
                return self._evict_lir(None)
            key = q.popitem(last=False)[0]
            del self._status[key]
            if key in self._s:
                self._nh[key] = None
            return key
        # A refused key is in use, so it is treated as accessed: from Q it moves to Q's back or
        # (when still in S) becomes LIR, demoting the oldest LIR key into Q as the next candidate.
        # Each refusal is one O(1) amortized step; the budget bounds a call, then a plain scan decides.
        budget = 2 * len(self._status) + 2
        while q and budget:
            budget -= 1
            key = next(iter(q))
            if can_evict(key):
                return self._drop_hir(key)
            self.on_hit(key)
        return self._evict_lir(can_evict) if not q else self._scan(can_evict)

    def _drop_hir(self, key: Key) -> Key:
        del self._q[key]
        del self._status[key]
        if key in self._s:
            self._nh[key] = None
        return key

    def _scan(self, can_evict: CanEvict) -> Key | None:
        key = self.peek(can_evict)
        if key is None:
            return None
        if self._status[key] == HIR:
            return self._drop_hir(key)
        self._drop_lir(key)
        return key

    def _drop_lir(self, key: Key) -> None:
        del self._s[key]
        del self._status[key]
        self._lirs -= 1
        self._prune()

    def _evict_lir(self, can_evict: CanEvict) -> Key | None:
        """Q is empty (no capacity given, or removals): take the oldest allowed LIR key."""
        s = self._s
        for _ in range(self._lirs):
            key = next(iter(s))
            if can_evict is None or can_evict(key):
                self._drop_lir(key)
                return key
            s.move_to_end(key)  # refused: in use, so it counts as accessed
            self._prune()
        return None
