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
Whether a block is an evictable leaf (unpinned, childless) is read from its node, so a policy can
ask "may I evict this?" in O(1).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from .shardmap import ShardedDict, index_shard, untrack


class Node:
    """One cached block. ``tier`` is the index of the tier holding its payload.

    ``tag`` must not refer back to the node: nodes are invisible to the cyclic GC. A node holds
    bytes, small ints and its tag, never another node (its parent is named by key), so it cannot be
    part of a reference cycle and refcounting alone frees it. Left tracked, every node is rescanned
    by each full collection: 0.2-0.7 s pauses at one million blocks, growing with the index.
    """

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
    """Block metadata for every cached block, across all tiers and namespaces.

    Nodes live in a ``ShardedDict`` (no insert rebuilds a table of every block). A block is
    evictable when it is indexed, unpinned and childless: read from the node itself, so no
    second map of every block has to be kept in step.
    """

    def __init__(self) -> None:
        self._nodes: ShardedDict[Hashable, Node] = ShardedDict(index_shard)
        self._shards = self._nodes.shards
        self._len = 0
        self._watchers: list[Callable[[Hashable, bool], None]] = []

    def watch(self, fn: Callable[[Hashable, bool], None]) -> None:
        """Call ``fn(key, evictable)`` whenever a block enters or leaves the evictable set.

        For policies that sample or order evictable leaves themselves (prefix-aware).
        """
        self._watchers.append(fn)

    @property
    def watched(self) -> bool:
        """Whether anything is told of the evictable set's changes (``watch``)."""
        return bool(self._watchers)

    def _became(self, key: Hashable, evictable: bool) -> None:
        for fn in self._watchers:
            fn(key, evictable)

    def __len__(self) -> int:
        return self._len

    def __contains__(self, key: object) -> bool:
        return key in self._shards[key[-1] if key.__class__ is bytes and key else hash(key) % 251]

    def __iter__(self) -> Iterator[Node]:
        return iter([n for shard in self._shards for n in shard.values()])

    def get(self, key: Hashable) -> Node | None:
        return self._shards[key[-1] if key.__class__ is bytes and key else hash(key) % 251].get(key)

    @property
    def getter(self) -> Callable[[Hashable], Node | None]:
        return self.get

    @property
    def shards(self) -> list[dict[Hashable, Node]]:
        """The node maps, by ``shardmap.index_shard``: the lookup walk indexes them inline."""
        return self._shards

    def match(self, chain: Iterable[tuple[Hashable, bytes]]) -> list[Node]:
        """Nodes of the longest verified prefix of a request's (key, token bytes) chain."""
        out: list[Node] = []
        for key, data in chain:
            node = self._shards[key[-1] if key.__class__ is bytes and key else hash(key) % 251].get(key)
            if node is None or node.tokens != data:
                break
            out.append(node)
        return out

    def insert(self, key: Hashable, parent: Hashable, tokens: bytes, depth: int, tag: Any = None) -> Node:
        """Add a block under ``parent`` (a block key, or the namespace root when depth is 0)."""
        shard = self._shards[key[-1] if key.__class__ is bytes and key else hash(key) % 251]
        if key in shard:
            raise KeyError("block already indexed")
        if depth > 0:
            pnode = self._shards[parent[-1] if parent.__class__ is bytes and parent else hash(parent) % 251].get(parent)
            if pnode is None:
                raise KeyError("parent block is not indexed: a chain is inserted from its root")
            pnode.children += 1
            if self._watchers and pnode.children == 1 and not pnode.pins:
                self._became(parent, False)
        node = Node(key, parent, tokens, depth, tag)
        untrack(node)
        shard[key] = node
        # Storing a node (a GC type) makes its dict tracked again; a tracked dict is traversed, every
        # entry read, by each full collection: 0.5 s at 7 M blocks, and with almost nothing else
        # tracked the collector runs them often. Untracked, it is left alone.
        untrack(shard)
        self._len += 1
        if self._watchers:
            self._became(key, True)
        return node

    def remove(self, key: Hashable) -> Node:
        """Remove an unpinned leaf and return it."""
        shard = self._shards[key[-1] if key.__class__ is bytes and key else hash(key) % 251]
        node = shard[key]
        if node.children or node.pins:
            raise ValueError(f"cannot remove {node!r}: only unpinned leaves leave the index")
        del shard[key]
        self._len -= 1
        if self._watchers:
            self._became(key, False)
        if node.depth > 0:
            pnode = self._shards[
                node.parent[-1] if node.parent.__class__ is bytes and node.parent else hash(node.parent) % 251
            ][node.parent]
            pnode.children -= 1
            if pnode.children == 0 and pnode.pins == 0 and self._watchers:
                self._became(node.parent, True)
        return node

    def _indexed(self, node: Node) -> bool:
        """``node`` itself (not a removed node whose key was indexed again) is in the index."""
        return (
            self._shards[node.key[-1] if node.key.__class__ is bytes and node.key else hash(node.key) % 251].get(
                node.key
            )
            is node
        )

    def pin(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            node.pins += 1
            if node.pins == 1 and not node.children and self._watchers and self._indexed(node):
                self._became(node.key, False)

    def unpin(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            if node.pins <= 0:
                raise ValueError("unpin of a block that is not pinned")
            node.pins -= 1
            if node.pins == 0 and node.children == 0 and self._watchers and self._indexed(node):
                self._became(node.key, True)

    def is_evictable(self, key: Hashable) -> bool:
        """True for an unpinned leaf: the only kind of block that may leave the index."""
        node = self._shards[key[-1] if key.__class__ is bytes and key else hash(key) % 251].get(key)
        return node is not None and not node.children and not node.pins

    def is_unpinned(self, key: Hashable) -> bool:
        node = self._shards[key[-1] if key.__class__ is bytes and key else hash(key) % 251].get(key)
        return node is not None and node.pins == 0

    def evictable(self) -> list[Hashable]:
        """Every unpinned leaf (a scan: for start-up, not for hot paths)."""
        return [n.key for shard in self._shards for n in shard.values() if not n.children and not n.pins]

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
