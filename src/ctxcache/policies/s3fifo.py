"""S3-FIFO (Yang et al., SOSP'23): a small probationary FIFO, a main FIFO and a ghost FIFO of ids.

Semantics follow libCacheSim's implementation, so miss ratios cross-check against it:

- With capacity C: small S = int(small_ratio * C), main M = C - S, ghost G = int(ghost_ratio * C).
- A new key enters small with freq 0, or main if its id is in the ghost. Until the first
  eviction, new keys go to main once small is full.
- Every hit adds 1 to freq.
- Evict from main while it holds more than M keys or small is empty, else from small.
- Small's head moves to main (freq reset to 0) if it was hit at least ``move_threshold`` times,
  else it leaves and its id goes to the ghost: one-hit wonders are forgotten cheaply.
- Main is CLOCK-like: a head with freq >= 1 goes to the back with min(freq, max_freq) - 1,
  a head with freq 0 is evicted.

libCacheSim looks a missed key up in the ghost before making room for it, so the ghost is trimmed
to G only on insert (after the lookup). It never inserts anything when S < 2 (C < 20); here small
holds at least one key. Without a capacity, C is the resident count at each eviction (and new
keys go to small from the start).
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from .base import CanEvict, Key, Policy
from .registry import register
from .replay import native_replay


@register
class S3FIFO(Policy):
    name = "s3fifo"
    needs_capacity = True

    def __init__(
        self,
        capacity: int | None = None,
        small_ratio: float = 0.1,
        ghost_ratio: float = 0.9,
        move_threshold: int = 2,
        max_freq: int = 3,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if capacity is not None and capacity < 1:
            raise ConfigError(f"s3fifo: capacity must be >= 1 block, got {capacity!r}")
        if not 0 < small_ratio < 1 or not ghost_ratio >= 0:
            raise ConfigError(
                f"s3fifo: need 0 < small_ratio < 1 and ghost_ratio >= 0, got {small_ratio}, {ghost_ratio}"
            )
        if move_threshold < 1 or max_freq < 1:
            raise ConfigError("s3fifo: move_threshold and max_freq must be >= 1")
        self.capacity = capacity
        self.small_ratio, self.ghost_ratio = float(small_ratio), float(ghost_ratio)
        self.move_threshold, self.max_freq = int(move_threshold), int(max_freq)
        self._small: OrderedDict[Key, None] = OrderedDict()
        self._main: OrderedDict[Key, None] = OrderedDict()
        self._ghost: OrderedDict[Key, None] = OrderedDict()
        self._freq: dict[Key, int] = {}  # resident keys only
        self._evicted = False
        self._fixed = self._limits_for(capacity) if capacity is not None else None

    def params(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "small_ratio": self.small_ratio,
            "ghost_ratio": self.ghost_ratio,
            "move_threshold": self.move_threshold,
            "max_freq": self.max_freq,
        }

    def _limits_for(self, cap: int) -> tuple[int, int, int]:
        small = max(1, int(self.small_ratio * cap))
        return small, cap - small, int(self.ghost_ratio * cap)

    def _limits(self) -> tuple[int, int, int]:
        """Small, main and ghost sizes."""
        return self._fixed or self._limits_for(max(1, len(self._freq)))

    def on_insert(self, key: Key) -> None:
        self._freq[key] = 0
        ghost, fixed = self._ghost, self._fixed
        if ghost.pop(key, 0) is None or (not self._evicted and fixed and len(self._small) >= fixed[0]):
            self._main[key] = None
        else:
            self._small[key] = None
        if len(ghost) > (limit := (fixed or self._limits())[2]):
            for _ in range(len(ghost) - limit):
                ghost.popitem(last=False)

    def on_hit(self, key: Key) -> None:
        self._freq[key] += 1

    def on_remove(self, key: Key) -> None:
        if self._freq.pop(key, None) is not None and self._small.pop(key, 0) is not None:
            del self._main[key]

    def __len__(self) -> int:
        return len(self._freq)

    def __contains__(self, key: object) -> bool:
        return key in self._freq

    def queue_of(self, key: Key) -> str | None:
        """Where a key is: "small", "main", "ghost" (not resident) or None."""
        for name, q in (("small", self._small), ("main", self._main), ("ghost", self._ghost)):
            if key in q:
                return name
        return None

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        if not self._freq:
            return None
        self._evicted = True
        small_first = bool(self._small) and len(self._main) <= self._limits()[1]
        # Small may drain into main without a victim (all its keys were hit enough or refused);
        # if a queue has nothing allowed, try the other, and main again after small, which may
        # just have promoted allowed keys.
        if small_first:
            victim = self._evict_small(can_evict)
            return victim if victim is not None else self._evict_main(can_evict)
        victim = self._evict_main(can_evict)
        if victim is None and can_evict is not None:
            victim = self._evict_small(can_evict)
            if victim is None:
                victim = self._evict_main(can_evict)
        return victim

    def _evict_small(self, can_evict: CanEvict) -> Key | None:
        small, main, freq, threshold = self._small, self._main, self._freq, self.move_threshold
        for _ in range(len(small)):
            key = small.popitem(last=False)[0]
            if freq[key] >= threshold:
                main[key] = None
                freq[key] = 0
            elif can_evict is None or can_evict(key):
                del freq[key]
                self._ghost[key] = None
                return key
            else:
                main[key] = None  # refused, so in use: it earned main, and is not rescanned here
        return None

    def _evict_main(self, can_evict: CanEvict) -> Key | None:
        main, freq, top = self._main, self._freq, self.max_freq
        # Each pass lowers every freq, so after max_freq passes all are 0 and one more pass finds
        # any allowed key. A refused key goes to the back with its freq, as if in use.
        for _ in range((top + 1) * len(main)):
            key = main.popitem(last=False)[0]
            f = freq[key]
            if f:
                freq[key] = (f if f < top else top) - 1
            elif can_evict is None or can_evict(key):
                del freq[key]
                return key
            main[key] = None
        return None

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s loop with this class's methods inlined (same misses, same state)."""
        if self._fixed is None or not self.fused_ok(S3FIFO, "_evict_small", "_evict_main", "_limits"):
            return super().replay_object(requests, capacity, clock)
        small, main, ghost, freq = self._small, self._main, self._ghost, self._freq
        if not (small or main or ghost or freq or self._evicted):  # fresh: the compiled loop, when built
            args = (capacity, self._fixed, self.move_threshold, self.max_freq, small, main, ghost, freq)
            out, requests = native_replay("s3fifo", requests, clock, *args)
            if out is not None:
                misses, self._evicted = out
                return int(misses)
        return self._replay_fused(requests, capacity, clock)

    def _replay_fused(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``replay_object``'s Python loop (without the compiled one, or over a used instance)."""
        small, main, ghost, freq = self._small, self._main, self._ghost, self._freq
        assert self._fixed is not None
        small_cap, main_cap, ghost_cap = self._fixed
        threshold, top = self.move_threshold, self.max_freq
        small_pop, main_pop, ghost_pop, ghost_popitem = small.popitem, main.popitem, ghost.pop, ghost.popitem
        evicted = self._evicted
        misses = resident = 0
        try:
            for r in requests:
                clock.t = r.time
                for b in r.blocks:
                    if b in freq:
                        freq[b] += 1
                        continue
                    misses += 1
                    if resident >= capacity:
                        if freq:  # evict(None)
                            evicted = True
                            victim = None
                            if small and len(main) <= main_cap:
                                for _ in range(len(small)):  # _evict_small
                                    key = small_pop(False)[0]
                                    if freq[key] >= threshold:
                                        main[key] = None
                                        freq[key] = 0
                                    else:
                                        del freq[key]
                                        ghost[key] = None
                                        victim = key
                                        break
                            if victim is None:
                                for _ in range((top + 1) * len(main)):  # _evict_main
                                    key = main_pop(False)[0]
                                    f = freq[key]
                                    if not f:
                                        del freq[key]
                                        break
                                    freq[key] = (f if f < top else top) - 1
                                    main[key] = None
                    else:
                        resident += 1
                    freq[b] = 0
                    if ghost_pop(b, 0) is None or (not evicted and len(small) >= small_cap):
                        main[b] = None
                    else:
                        small[b] = None
                    if len(ghost) > ghost_cap:
                        for _ in range(len(ghost) - ghost_cap):
                            ghost_popitem(False)
        finally:
            self._evicted = evicted
        return misses

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        """Runs ``evict`` on a copy (O(n), in C): the choice depends on how the queues rotate."""
        twin = copy.copy(self)
        twin._small, twin._main, twin._freq = self._small.copy(), self._main.copy(), self._freq.copy()
        twin._ghost = OrderedDict()  # evict only writes to it
        return twin.evict(can_evict)
