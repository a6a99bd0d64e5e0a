"""Operator pins: prefixes an operator (or the region replicator) keeps cached, whatever the
eviction pressure.

A pinned prefix is the chain of blocks from its namespace root down to the pinned key. Each of
those blocks carries one index pin for as long as at least one pinned prefix covers it; a block
pinned is never evicted nor demoted (the index's rule for pins, as for a lookup's). Pins taken by
lookups are refcounts a Match holds and ``release`` drops; these are a set kept here: pinning a
prefix twice pins it once, one ``unpin`` ends it, and ``release`` never touches them (it unpins a
Match's own nodes only).

Erasure and expiry win over a pin: a tenant's erasure, an invalidation, a flush or a block's TTL
running out drops every pinned prefix that covers a block leaving (a pin must not keep erased or
expired data alive). Pins are not kept over a restart, and are released at ``close`` before RAM
is spilled to disk (a pinned block would otherwise be the one block left behind in RAM).

Not thread-safe: used under the engine's lock.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from ..index import Node, RadixIndex


class OperatorPins:
    def __init__(self, index: RadixIndex, prune: Callable[[Hashable], None]) -> None:
        self.index, self.prune = index, prune  # prune: Placement.prune (lost blocks, once unpinned)
        self.prefixes: dict[Hashable, list[Node]] = {}  # pinned key -> its chain, root first
        self.held: dict[Hashable, int] = {}  # block key -> pinned prefixes covering it

    def __contains__(self, key: object) -> bool:
        return key in self.held

    def pin(self, key: Hashable) -> int:
        """Pin the prefix ending at ``key``; the blocks it covers (0: ``key`` is not indexed, so
        nothing is pinned and nothing is remembered). Pinning a pinned prefix changes nothing."""
        chain = self.prefixes.get(key)
        if chain is not None:
            return len(chain)
        if self.index.get(key) is None:
            return 0
        chain = self.index.chain(key)
        for node in chain:
            n = self.held.get(node.key, 0)
            self.held[node.key] = n + 1
            if n == 0:  # the first prefix over this block: one index pin, whatever more come
                self.index.pin([node])
        self.prefixes[key] = chain
        return len(chain)

    def unpin(self, key: Hashable) -> int:
        """End the pin of the prefix ending at ``key``; the blocks it covered (0: not pinned)."""
        chain = self.prefixes.pop(key, None)
        if chain is None:
            return 0
        for node in chain:
            n = self.held[node.key] - 1
            if n:
                self.held[node.key] = n
                continue
            del self.held[node.key]
            self.index.unpin([node])
        self.prune(chain[-1].key)  # blocks lost while pinned had nothing to serve: they go now
        return len(chain)

    def drop_covering(self, keys: Iterable[Hashable]) -> int:
        """Erasure or expiry wins: end every pinned prefix that covers one of ``keys``, before
        they leave (a pinned block cannot). Returns how many prefixes ended."""
        leaving = {k for k in keys if k in self.held}
        if not leaving:
            return 0
        ended = [p for p, chain in self.prefixes.items() if any(n.key in leaving for n in chain)]
        for p in ended:
            self.unpin(p)
        return len(ended)

    def clear(self) -> None:
        for p in list(self.prefixes):
            self.unpin(p)

    def pinned(self) -> list[Hashable]:
        return list(self.prefixes)
