"""Erasure: remove blocks from every tier on purpose (a tenant's data, expired blocks, a flush).

One path for all three: under the lock, each block is dropped from every slot that holds it
(copies included; deletes from slow tiers are queued behind any write of the same key, so they
cannot be overtaken) and leaves the index; pinned blocks (a request is reading them) are marked
expired instead, so they are misses from now on and the sweeper takes them once released. Then,
outside the lock, the mover's queue is drained and every persistent tier is asked again for each
erased key: the erasure is ``verified`` only if none answers.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from ..index import Node

if TYPE_CHECKING:
    from .core import Engine

audit = logging.getLogger("ctxcache.audit")
SWEEP_BATCH = 4096  # expired blocks reclaimed per lock hold


def _erase_key(e: Engine, key: Hashable) -> bool:
    """Under the lock: drop ``key`` from every tier and the index. False if it is in use."""
    node = e.index.get(key)
    if node is not None and not e.index.is_evictable(key):
        return False
    pl = e.placement
    for t, slot in enumerate(e.slots):
        if slot.holds(key) or key in slot.owners:
            slot.drop(key)
            pl._drop(t, key)
        elif not slot.slow and key in slot.tier:
            slot.tier.delete(key)
    if node is not None:
        e.index.remove(key)
        pl.prune(node.parent)
    e.expiry.forget(key)
    return True


def _erase_nodes(e: Engine, nodes: list[Node]) -> tuple[list[Hashable], int]:
    """Deepest first, so each block is a leaf when its turn comes. Returns (erased, in use)."""
    erased: list[Hashable] = []
    busy = 0
    for node in sorted(nodes, key=lambda n: -n.depth):
        if _erase_key(e, node.key):
            erased.append(node.key)
        else:
            busy += 1
            e.expiry.set(node.key, float("-inf"), node.depth)  # a miss from now on
    return erased, busy


def _verify(e: Engine, keys: list[Hashable]) -> bool:
    """Outside the lock, after the mover drained: no persistent tier still has any key."""
    e.flush()
    for slot in e.slots:
        if slot.persistent and keys:
            tier = slot.tier
            for i in range(0, len(keys), 256):
                chunk = keys[i : i + 256]
                if any(b is not None for b in tier.load_many(chunk, [None] * len(chunk))):
                    return False
    return True


def erase_tenant(e: Engine, tenant: str) -> dict[str, Any]:
    with e.lock:
        nodes = [n for n in e.index if n.tag == tenant]
        erased, busy = _erase_nodes(e, nodes)
        for slot_pos, slot in enumerate(e.slots):  # blocks charged to the tenant the index lacks
            for key in slot.tenant_blocks(tenant):
                slot.drop(key)
                e.placement._drop(slot_pos, key)
                erased.append(key)
        e.counters.erased += len(erased)
    verified = _verify(e, erased) and busy == 0
    out = {"tenant": tenant, "erased_blocks": len(erased), "in_use": busy, "verified": verified}
    audit.info("erase tenant=%s blocks=%d in_use=%d verified=%s", tenant, len(erased), busy, verified)
    return out


def flush_all(e: Engine) -> dict[str, Any]:
    """Every unpinned block of every tenant, from every tier (like vLLM's reset_prefix_cache)."""
    with e.lock:
        erased, busy = _erase_nodes(e, list(e.index))
        for t, slot in enumerate(e.slots):  # orphans: blocks of earlier runs the index lacks
            for key in list(slot.owners):
                slot.drop(key)
                e.placement._drop(t, key)
                erased.append(key)
        e.counters.erased += len(erased)
    verified = _verify(e, erased) and busy == 0
    audit.info("flush blocks=%d in_use=%d verified=%s", len(erased), busy, verified)
    return {"erased_blocks": len(erased), "in_use": busy, "verified": verified}


def sweep(e: Engine, now: float) -> int:
    """Reclaim expired blocks: O(log n) each (heap pops), never a scan of live blocks."""
    if not len(e.expiry):
        return 0
    done = 0
    with e.lock:
        later: list[tuple[Hashable, float, int]] = []
        for key in e.expiry.due(now, SWEEP_BATCH):
            node = e.index.get(key)
            if node is None:
                e.expiry.forget(key)
            elif _erase_key(e, key):
                done += 1
            else:  # pinned, or a parent whose children have not expired yet: retry next sweep
                later.append((key, e.expiry.deadline[key], node.depth))
        for key, d, depth in later:
            e.expiry.set(key, d, depth)
        e.counters.expired += done
    return done
