"""LFU: evict the key with the fewest uses; ties go to the key that reached that count first.

Counts start at 1 on insert and are forgotten on eviction (no history of evicted keys), as in
libCacheSim. O(1) per operation: one insertion-ordered bucket per use count, and the lowest
non-empty count tracked as keys move up.

A key ``can_evict`` refuses is in use (pinned, or a parent of live blocks): ``evict`` counts the
refusal as a use, as lfu-decay does, so the key moves up a count and is not asked again on every
call while it stays in use. Going only behind its equals kept it at the lowest count, and once
only refused keys were left there every evict asked them all again. The uses are counted after
the search, so the search walks buckets that do not change under it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

from .base import CanEvict, Key, Policy
from .registry import register
from .replay import native_replay


@register
class LFU(Policy):
    name = "lfu"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._count: dict[Key, int] = {}
        # count -> keys in the order they got it. OrderedDict, not dict: a plain dict that is
        # drained from the front makes next(iter(...)) walk every deleted slot.
        self._buckets: dict[int, OrderedDict[Key, None]] = {}
        self._min = 0

    def on_insert(self, key: Key) -> None:
        self._count[key] = 1
        bucket = self._buckets.get(1)
        if bucket is None:
            bucket = self._buckets[1] = OrderedDict()
        bucket[key] = None
        self._min = 1

    def on_hit(self, key: Key) -> None:
        n = self._count[key]
        bucket = self._buckets[n]
        del bucket[key]
        if not bucket:
            del self._buckets[n]
            if self._min == n:
                self._min = n + 1
        self._count[key] = n + 1
        nxt = self._buckets.get(n + 1)
        if nxt is None:
            nxt = self._buckets[n + 1] = OrderedDict()
        nxt[key] = None

    def _unlink(self, key: Key) -> None:
        n = self._count.pop(key)
        bucket = self._buckets[n]
        del bucket[key]
        if not bucket:
            del self._buckets[n]
            if self._min == n:
                self._min = next(self._counts_from(n), 0)

    def on_remove(self, key: Key) -> None:
        if key in self._count:
            self._unlink(key)

    def __len__(self) -> int:
        return len(self._count)

    def __contains__(self, key: object) -> bool:
        return key in self._count

    def _counts_from(self, low: int) -> Iterator[int]:
        """Existing use counts >= low, ascending. Counts are dense near the bottom, so step up
        one at a time first and sort only when the gaps get long."""
        buckets = self._buckets
        n = low
        for n in range(low, low + 64):
            if n in buckets:
                yield n
        yield from sorted(c for c in list(buckets) if c > n)

    def _victim(self, can_evict: CanEvict, refused: list[Key] | None) -> Key | None:
        if not self._count:
            return None
        if can_evict is None:
            return next(iter(self._buckets[self._min]))
        for n in self._counts_from(self._min):
            for key in self._buckets[n]:
                if can_evict(key):
                    return key
                if refused is not None:
                    refused.append(key)
        return None

    def peek(self, can_evict: CanEvict = None) -> Key | None:
        return self._victim(can_evict, None)

    def replay_object(self, requests: Iterable[Any], capacity: int, clock: Any) -> int:
        """``Policy.replay_object``'s loop with this class's methods inlined (same misses, same state).

        An eviction is always followed by an insert, which sets the lowest count to 1: the search
        for the next count up that ``_unlink`` does when the victim empties its bucket is skipped."""
        if not self.fused_ok(LFU, "_unlink", "_victim", "_counts_from"):
            return super().replay_object(requests, capacity, clock)
        count, buckets = self._count, self._buckets
        if not (count or buckets):  # fresh: the compiled loop, when built
            out, requests = native_replay("lfu", requests, clock, capacity, count, buckets, OrderedDict)
            if out is not None:
                misses, self._min = out
                return int(misses)
        low = self._min
        get = buckets.get
        ones = get(1)  # count 1's bucket (most keys), kept at hand while it exists
        misses = resident = 0
        try:
            for r in requests:
                clock.t = r.time
                for b in r.blocks:
                    if b in count:  # on_hit
                        n = count[b]
                        bucket = buckets[n]
                        del bucket[b]
                        if not bucket:
                            del buckets[n]
                            if n == 1:
                                ones = None
                            if low == n:
                                low = n + 1
                        n += 1
                        count[b] = n
                        nxt = get(n)
                        if nxt is None:
                            nxt = buckets[n] = OrderedDict()
                        nxt[b] = None
                        continue
                    misses += 1
                    if resident >= capacity:
                        if count:  # evict(None): the first key of the lowest count
                            bucket = ones if low == 1 else buckets[low]  # type: ignore[assignment]  # low == 1: ones is set
                            del count[bucket.popitem(last=False)[0]]
                            if not bucket:
                                del buckets[low]
                                if low == 1:
                                    ones = None
                    else:
                        resident += 1
                    count[b] = 1
                    if ones is None:
                        ones = buckets[1] = OrderedDict()
                    ones[b] = None
                    low = 1
        finally:
            self._min = low
        return misses

    def evict(self, can_evict: CanEvict = None) -> Key | None:
        refused: list[Key] = []
        key = self._victim(can_evict, refused)
        if key is not None:
            self._unlink(key)
        for used in refused:
            self.on_hit(used)
        return key
