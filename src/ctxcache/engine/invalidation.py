"""Invalidation: a withdrawn document or system prompt leaves the cache with everything built on it.

A block's key commits to every token before it, so the blocks cached "under" a key (its subtree:
every prompt that continued it) hold KV computed from its tokens; they go with it. The subtree is
found twice over:

- in the index, by parent links (one scan of the index to list children: an admin operation);
- in each persistent tier's storage, by the parent key each block's header records
  (``Tier.stored_links``: Redis SCAN plus a range read of each header, disk every file's header),
  which finds blocks this index never held, written by another process sharing the Redis prefix
  or left on disk by an earlier run. A stored block is in the subtree when its parent is the key
  or any block already in it, so a subtree whose middle was indexed here and whose leaves only
  another process stored is still found whole.

Removal is erasure's (erasure.py): each block leaves every tier and the index, deepest first;
a block a lookup holds (in use) is marked expired instead (a miss from now on, taken by the sweep
once released, journaled at close if still held) and the sweeper is started if it was not
running; blocks found only in storage are deleted through the mover and the search runs again.
``verified``: the re-read of every erased key and a last search of every persistent tier find
none of them. A tier that cannot be searched (unreachable) leaves it False; a RAM tier needs no
search (its blocks are all indexed).

Idempotent: an unknown or already invalidated key finds nothing and is verified. Storing the same
tokens again afterwards is allowed and caches them anew: an invalidation withdraws what is cached
now, it is not a ban on the tokens (a caller that re-sends the document is giving it again). A
store while an in-use block is still held keeps that block marked expired (a miss) until the sweep
takes it.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any

from ..index import Node
from . import erasure as _erasure

if TYPE_CHECKING:
    from .core import Engine

audit = logging.getLogger("ctxcache.audit")
ROUNDS = 3  # storage searches before giving up on verification (each after the deletes drained)


def _children(nodes: Iterable[Node]) -> dict[Hashable, list[Node]]:
    kids: dict[Hashable, list[Node]] = {}
    for n in nodes:
        if n.depth > 0:
            kids.setdefault(n.parent, []).append(n)
    return kids


def _subtree(e: Engine, roots: set[Hashable]) -> list[Node]:
    """Under the lock: the indexed blocks that are in ``roots`` or descend from one of them."""
    kids = _children(e.index)
    out: list[Node] = []
    seen: set[Hashable] = set()
    todo = [n for k in roots if (n := e.index.get(k)) is not None]
    todo += [c for k in roots for c in kids.get(k, ())]
    while todo:
        node = todo.pop()
        if node.key in seen:
            continue
        seen.add(node.key)
        out.append(node)
        todo.extend(kids.get(node.key, ()))
    return out


def _stored_subtree(links: list[tuple[bytes, bytes]], roots: set[Hashable]) -> list[bytes]:
    """Stored keys in ``roots`` or whose header's parent chain leads back to one of them."""
    kids: dict[Hashable, list[bytes]] = {}
    for kb, parent in links:
        kids.setdefault(parent, []).append(kb)
    stored: set[Hashable] = {kb for kb, _ in links}
    out: list[bytes] = []
    seen: set[Hashable] = set()
    todo: list[Hashable] = list(roots)
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        if key in stored and isinstance(key, bytes):
            out.append(key)
        todo.extend(kids.get(key, ()))
    return out


def _erase_stored(e: Engine, roots: set[Hashable]) -> tuple[int, bool]:
    """Outside the lock: search each persistent tier for the subtree's blocks, delete them, search
    again until none is left. Returns (block copies deleted, verified)."""
    deleted = 0
    for _ in range(ROUNDS):
        found: dict[int, list[bytes]] = {}
        for t, slot in enumerate(e.slots):
            if slot.persistent:
                links = slot.tier.stored_links()
                if links is None:  # unreachable: nothing can be claimed about it
                    return deleted, False
                keys = _stored_subtree(links, roots)
                if keys:
                    found[t] = keys
        with e.lock, e.leaving_as("erased"):
            # Indexed since (a lookup discovered them meanwhile) or under a found block: erased
            # as in the first pass; the stored copies then leave each tier that has them.
            nodes = _subtree(e, roots | {k for keys in found.values() for k in keys})
            roots.update(n.key for n in nodes)
            _, queued, busy = _erasure.erase_found(e, nodes, found)
        deleted += queued  # copies in storage; a block indexed since is counted by its stored copy
        if not found and not nodes:
            return deleted, True
        e.flush()
        if busy:
            return deleted, False
    return deleted, False


def invalidate(e: Engine, key: Hashable) -> dict[str, Any]:
    """Remove ``key``'s block and its whole subtree from every tier; wait for the deletes, verify."""
    roots: set[Hashable] = {key}
    with e.lock, e.leaving_as("erased"):
        nodes = _subtree(e, roots)
        roots.update(n.key for n in nodes)
        erased, _, busy = _erasure.erase_found(e, nodes, {})
    if busy:
        e.ensure_sweeper()  # held blocks leave once released: the sweep takes them
    verified = _erasure._verify(e, erased) and busy == 0
    stored, clean = _erase_stored(e, roots)
    verified = verified and clean
    shown = key.hex() if isinstance(key, bytes) else repr(key)
    out = {"key": shown, "erased_blocks": len(erased) + stored, "found_in_storage": stored, "in_use": busy,
           "verified": verified}  # fmt: skip
    audit.info(
        "invalidate key=%s blocks=%d found_in_storage=%d in_use=%d verified=%s",
        shown, len(erased) + stored, stored, busy, verified,
    )  # fmt: skip
    return out
