"""Block TTLs: a deadline per block, refreshed on every hit (Anthropic's semantics), and a
min-heap of deadlines so the sweeper pays O(log n) per expired block, never a scan.

A refresh pushes a new heap entry and leaves the old one behind (lazy deletion: an entry whose
deadline no longer matches the block's is skipped when popped); the heap is rebuilt once stale
entries outnumber live ones, so its size stays O(n) and the rebuild is amortized over the
refreshes that made it stale. Ties pop deepest block first, so a chain expires from its leaf.
Not thread-safe: used under the engine's lock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterable

from ..index import Node


class Expiry:
    def __init__(self) -> None:
        self.deadline: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, int, Hashable]] = []
        self._seq = itertools.count()
        # keys kept expired with no heap entry while a tier that may keep a copy of them is down
        # (engine/erasure.py ``sweep``): out of the heap, they cannot starve later deadlines
        self.held: dict[Hashable, None] = {}

    def __len__(self) -> int:
        return len(self.deadline)

    def set(self, key: Hashable, deadline: float, depth: int = 0) -> None:
        self.deadline[key] = deadline
        heapq.heappush(self._heap, (deadline, -depth, next(self._seq), key))
        if len(self._heap) > 2 * len(self.deadline) + 64:
            self._compact()

    def refresh(self, nodes: Iterable[Node], deadline: float) -> None:
        for n in nodes:
            self.set(n.key, deadline, n.depth)

    def expired(self, key: Hashable, now: float) -> bool:
        d = self.deadline.get(key)
        return d is not None and d <= now

    def cut(self, nodes: list[Node], now: float) -> None:
        """Truncate a walked chain at its first expired block: expired is a miss."""
        dl = self.deadline
        for i, n in enumerate(nodes):
            d = dl.get(n.key)
            if d is not None and d <= now:
                del nodes[i:]
                return

    def forget(self, key: Hashable) -> None:
        self.deadline.pop(key, None)
        self.held.pop(key, None)

    def hold(self, key: Hashable, now: float) -> None:
        """Keep ``key`` expired (a miss, never discovered) until the sweep takes it from ``held``."""
        self.deadline[key] = now
        self.held[key] = None

    def due(self, now: float, limit: int | None = None) -> list[Hashable]:
        """Pop the blocks whose deadline has passed (deepest first at equal deadlines)."""
        out: dict[Hashable, None] = {}  # once each: refreshes to the same deadline leave equal entries
        heap, dl = self._heap, self.deadline
        while heap and heap[0][0] <= now and (limit is None or len(out) < limit):
            d, _, _, key = heapq.heappop(heap)
            if dl.get(key) == d:
                out[key] = None
        return list(out)

    def _compact(self) -> None:
        live = {}
        for entry in self._heap:
            if self.deadline.get(entry[3]) == entry[0]:
                live[entry[3]] = entry
        self._heap = list(live.values())
        heapq.heapify(self._heap)
