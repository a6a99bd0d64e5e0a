"""Radix index over chained block keys.

Because a block's key already commits to every token before it, the tree needs no edge labels:
a node is found by its key and points to its parent's key. Matching walks a request's keys from
the first block and stops at the first absent or unverified one, which is the longest cached
prefix. Each node keeps its block's token bytes; a hit whose bytes differ from the request's
(a hash collision) is a miss.

Eviction rules the index enforces:
- only an unpinned leaf may leave the index (a child without its parent could never be hit);
- pins are refcounts; a pinned block's ancestors are not leaves, so they stay in the index too
  (the engine pins every block of a Match when a pin must also keep it in its tier).
The set of evictable leaves (unpinned, childless) is maintained incrementally, so a policy can ask
"may I evict this?" in O(1).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any


class Node:
    """One cached block. ``tier`` is the index of the tier holding its payload."""

    __slots__ = ("key", "parent", "tokens", "depth", "children", "pins", "tier", "tag")

    def __init__(self, key: Hashable, parent: Hashable, tokens: bytes, depth: int, tag: Any) -> None:
        self.key = key
        self.parent = parent  # the namespace root for depth 0, else the parent block's key
        self.tokens = tokens
        self.depth = depth
        self.children = 0
        self.pins = 0
        self.tier = 0
        self.tag = tag

    def __repr__(self) -> str:
        return f"Node(depth={self.depth}, children={self.children}, pins={self.pins}, tier={self.tier})"


class RadixIndex:
    """Block metadata for every cached block, across all tiers and namespaces."""

    def __init__(self) -> None:
        self._nodes: dict[Hashable, Node] = {}
        self._evictable: dict[Hashable, None] = {}  # insertion-ordered set
        self._watchers: list[Callable[[Hashable, bool], None]] = []

    def watch(self, fn: Callable[[Hashable, bool], None]) -> None:
        """Call ``fn(key, evictable)`` whenever a block enters or leaves the evictable set.

        For policies that sample or order evictable leaves themselves (prefix-aware).
        """
        self._watchers.append(fn)

    def _became(self, key: Hashable, evictable: bool) -> None:
        for fn in self._watchers:
            fn(key, evictable)

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self._nodes.values()))

    def get(self, key: Hashable) -> Node | None:
        return self._nodes.get(key)

    @property
    def getter(self) -> Callable[[Hashable], Node | None]:
        """The node dict's own ``get``: no Python frame per call, for the lookup hot loop."""
        return self._nodes.get

    def match(self, chain: Iterable[tuple[Hashable, bytes]]) -> list[Node]:
        """Nodes of the longest verified prefix of a request's (key, token bytes) chain."""
        out: list[Node] = []
        nodes = self._nodes
        for key, data in chain:
            node = nodes.get(key)
            if node is None or node.tokens != data:
                break
            out.append(node)
        return out

    def insert(self, key: Hashable, parent: Hashable, tokens: bytes, depth: int, tag: Any = None) -> Node:
        """Add a block under ``parent`` (a block key, or the namespace root when depth is 0)."""
        if key in self._nodes:
            raise KeyError("block already indexed")
        if depth > 0:
            pnode = self._nodes.get(parent)
            if pnode is None:
                raise KeyError("parent block is not indexed: a chain is inserted from its root")
            pnode.children += 1
            if self._evictable.pop(parent, 0) is None and self._watchers:
                self._became(parent, False)
        node = Node(key, parent, tokens, depth, tag)
        self._nodes[key] = node
        self._evictable[key] = None
        if self._watchers:
            self._became(key, True)
        return node

    def remove(self, key: Hashable) -> Node:
        """Remove an unpinned leaf and return it."""
        node = self._nodes[key]
        if node.children or node.pins:
            raise ValueError(f"cannot remove {node!r}: only unpinned leaves leave the index")
        del self._nodes[key]
        del self._evictable[key]
        if self._watchers:
            self._became(key, False)
        if node.depth > 0:
            pnode = self._nodes[node.parent]
            pnode.children -= 1
            if pnode.children == 0 and pnode.pins == 0:
                self._evictable[node.parent] = None
                if self._watchers:
                    self._became(node.parent, True)
        return node

    def pin(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            node.pins += 1
            if self._evictable.pop(node.key, 0) is None and self._watchers:
                self._became(node.key, False)

    def unpin(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            if node.pins <= 0:
                raise ValueError("unpin of a block that is not pinned")
            node.pins -= 1
            if node.pins == 0 and node.children == 0 and node.key in self._nodes:
                self._evictable[node.key] = None
                if self._watchers:
                    self._became(node.key, True)

    def is_evictable(self, key: Hashable) -> bool:
        """True for an unpinned leaf: the only kind of block that may leave the index."""
        return key in self._evictable

    def is_unpinned(self, key: Hashable) -> bool:
        node = self._nodes.get(key)
        return node is not None and node.pins == 0

    def evictable(self) -> list[Hashable]:
        return list(self._evictable)

    def chain(self, key: Hashable) -> list[Node]:
        """The node and its ancestors, root first. Raises KeyError if the chain is broken."""
        out = []
        node = self._nodes[key]
        while True:
            out.append(node)
            if node.depth == 0:
                break
            node = self._nodes[node.parent]
        out.reverse()
        return out
