"""SIEVE (Zhang et al., NSDI'24): a FIFO queue, a visited bit per key and a hand that sweeps it.

New keys enter at the head; a hit only sets the key's visited bit. To evict, the hand moves from
the tail towards the head, clearing visited bits, and takes the first unvisited key; the survivors
keep their place, and the hand wraps to the tail after passing the head.

The queue is split at the hand into two OrderedDicts: ``_ahead`` (from the hand to the head, not
yet swept this round, where new keys land) and ``_behind`` (already swept, oldest first). Sweeping
a survivor moves it from the front of ``_ahead`` to the back of ``_behind``, so every step is O(1)
in C (OrderedDicts, because a plain dict rescans its deleted front slots and made sweeps quadratic)
and a removal in the middle is a dict delete. When ``_ahead`` runs dry the hand wraps: ``_behind``
becomes ``_ahead``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from .base import CanEvict, Key, Policy
from .registry import register


@register
class Sieve(Policy):
    name = "sieve"

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self._ahead: OrderedDict[Key, None] = OrderedDict()
        self._behind: OrderedDict[Key, None] = OrderedDict()
        self._visited: set[Key] = set()

    def on_insert(self, key: Key) -> None:
        self._ahead[key] = None

    def on_hit(self, key: Key) -> None:
        self._visited.add(key)

    def on_hits(self, keys: Iterable[Key]) -> None:
        self._visited.update(keys)

    def on_remove(self, key: Key) -> None:
        if self._ahead.pop(key, 0) is None or self._behind.pop(key, 0) is None:
            self._visited.discard(key)
            if not self._ahead:
                self._wrap()

    def __len__(self) -> int:
        return len(self._ahead) + len(self._behind)

    def __contains__(self, key: object) -> bool:
        return key in self._ahead or key in self._behind

    def _wrap(self) -> None:
        # Kept as an invariant (``_ahead`` empty only if all is), so a key inserted after the
        # hand passed the head is not swept before the older keys at the tail.
        self._ahead, self._behind = self._behind, OrderedDict()

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        ahead, visited = self._ahead, self._visited
        # A refused key counts as visited: the hand passes it, so each key costs O(1) per round.
        # Two rounds clear every bit, the third finds any allowed key: the loop is bounded.
        for _ in range(3 * len(self) + 1):
            if not ahead:
                return None
            key = ahead.popitem(last=False)[0]
            if key in visited:
                visited.discard(key)
            elif can_evict is None or can_evict(key):
                if not ahead:
                    self._wrap()
                return key
            self._behind[key] = None
            if not ahead:
                self._wrap()
                ahead = self._ahead
        return None

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s loop with this class's methods inlined (same misses, same state)."""
        if not self.fused_ok(Sieve, "_wrap"):
            return super().replay_object(requests, capacity, clock)
        ahead, behind, visited = self._ahead, self._behind, self._visited
        see, unsee = visited.add, visited.remove
        misses = resident = 0
        try:
            for r in requests:
                clock.t = r.time
                for b in r.blocks:
                    if b in ahead or b in behind:
                        see(b)
                        continue
                    misses += 1
                    if resident >= capacity:
                        # evict(None): the hand takes the first unvisited key, clearing bits on the way
                        while ahead:
                            key = ahead.popitem(last=False)[0]
                            if key in visited:
                                unsee(key)
                            else:
                                if not ahead:
                                    ahead, behind = behind, OrderedDict()
                                break
                            behind[key] = None
                            if not ahead:
                                ahead, behind = behind, OrderedDict()
                    else:
                        resident += 1
                    ahead[b] = None
        finally:
            self._ahead, self._behind = ahead, behind
        return misses

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        """Replays the sweep of ``evict`` without clearing bits: up to three rounds, as there."""
        visited = self._visited

        def ok(k: Key) -> bool:
            return can_evict is None or can_evict(k)

        # Round 1 sweeps _ahead; round 2 _behind then (all bits now clear) the old _ahead; round 3
        # reaches the _behind keys whose bits round 2 cleared.
        for k in self._ahead:
            if k not in visited and ok(k):
                return k
        for k in self._behind:
            if k not in visited and ok(k):
                return k
        for k in self._ahead:
            if ok(k):
                return k
        for k in self._behind:
            if ok(k):
                return k
        return None
