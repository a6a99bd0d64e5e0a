"""Erasure: remove blocks from every tier on purpose (a tenant's data, expired blocks, a flush).

One path for all three: under the lock, each block is dropped from every slot that holds it
(copies included; deletes from slow tiers are queued behind any write of the same key, so they
cannot be overtaken) and leaves the index; pinned blocks (a request is reading them) are marked
expired instead, so they are misses from now on and the sweeper takes them once released. Then,
outside the lock, the mover's queue is drained and every persistent tier is asked again for each
erased key: the erasure is ``verified`` only if none answers. A tenant's erasure then searches
each persistent tier's storage by block header (``Tier.stored_keys_of``: Redis SCAN plus a range
read of each header) for blocks this index never held, written by another process or an earlier
run, deletes them and searches again: verified only when a search finds none. A flush does the
same search for every tenant's blocks.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from ..index import Node
from . import discovery as _discovery

if TYPE_CHECKING:
    from .core import Engine
    from .slot import Slot

audit = logging.getLogger("ctxcache.audit")
SWEEP_BATCH = 4096  # expired blocks reclaimed per lock hold
ERASED_IN_USE = float("-inf")  # the deadline of a block erased while a request held it


def _orphan_copy(slot: Slot, key: Hashable) -> bool:
    """A persistent tier may keep a copy of ``key`` it does not charge: an earlier run's or another
    process's (Redis charges nothing at start). Its filter answers from memory, no I/O."""
    return slot.persistent and not slot.holds(key) and slot.tier.might_contain_many([key])[0]


def _unanswered(e: Engine, key: Hashable) -> bool:
    """A persistent tier that does not charge ``key`` is down: whether it keeps an uncharged copy
    (``_orphan_copy``) cannot be told until it is back."""
    return any(s.persistent and not s.holds(key) and not s.tier.healthy for s in e.slots)


def _erase_key(e: Engine, key: Hashable) -> bool:
    """Under the lock: drop ``key`` from every tier and the index. False if it is in use."""
    node = e.index.get(key)
    if node is not None and not e.index.is_evictable(key):
        return False
    pl = e.placement
    for t, slot in enumerate(e.slots):
        if slot.holds(key) or key in slot.owners:
            pl._drop(t, key, erase=True)  # first: it reads the owner, charged again if the delete fails
            slot.drop(key)
        elif not slot.slow and key in slot.tier:
            slot.tier.delete(key)
        elif slot.slow and pl.mover.leaving(key, t):  # a demotion out of it is queued: should its
            pl._drop(t, key, erase=True)  # write be refused, the block stays there (an orphan) without this delete
        elif _orphan_copy(slot, key):  # left, discovery served it once the deadline went (seed 201097)
            pl._drop(t, key, erase=True)
    if node is not None:
        e.index.remove(key)
        pl.prune(node.parent)
    e.expiry.forget(key)
    for t, slot in enumerate(e.slots):  # a delete from a slow tier queued: until it lands, never discovered there
        if slot.slow and pl.mover.deleting(key, t):
            pl.mark_erased(key, t)
    return True


def _erase_nodes(e: Engine, nodes: list[Node]) -> tuple[list[Hashable], int]:
    """Deepest first, so each block is a leaf when its turn comes. Returns (erased, in use).
    Erasure wins over an operator pin: the pinned prefixes over these blocks end first."""
    e.pins.drop_covering(n.key for n in nodes)
    erased: list[Hashable] = []
    busy = 0
    for node in sorted(nodes, key=lambda n: -n.depth):
        if _erase_key(e, node.key):
            erased.append(node.key)
        else:
            busy += 1
            e.expiry.set(node.key, ERASED_IN_USE, node.depth)  # a miss from now on
            for t, slot in enumerate(e.slots):  # should an eviction's delete be refused before the
                if slot.slow and (slot.holds(node.key) or node.key in slot.owners):  # sweep comes, the
                    e.placement.mark_erased(node.key, t)  # kept blob never serves again (seed 308667)
    return erased, busy


def _verify(e: Engine, keys: list[Hashable], failed: set[int] | None = None) -> bool:
    """Outside the lock, after the mover drained: no persistent tier still has any key (a key its
    tier could not reach may still be stored: not verified). ``failed``: where the tiers that could
    not be reached are added (every tier is then asked)."""
    e.flush()
    ok = True
    for t, slot in enumerate(e.slots):
        if slot.persistent and keys:
            tier = slot.tier
            for i in range(0, len(keys), 256):
                chunk, unreachable = keys[i : i + 256], set[int]()
                got = tier.load_many(chunk, [None] * len(chunk), unreachable)
                with e.lock:  # a block found corrupt there is gone: what still counted it follows
                    for key, _ in (
                        (k, b) for j, (k, b) in enumerate(zip(chunk, got)) if b is None and j not in unreachable
                    ):
                        _discovery.vanished(e.placement, t, key)
                if any(b is not None for b in got) or unreachable:
                    ok = False
                    if failed is None:
                        return False
                    if unreachable:  # a block still there is known: erased, journaled (tombstones)
                        failed.add(t)
                        break
    return ok


def _drop_stored(e: Engine, tenant: str | None, found: dict[int, list[bytes]]) -> tuple[int, int]:
    """Under the lock: blocks of ``tenant`` (None: anyone's) found in storage leave the index (if a
    lookup met them meanwhile) and each tier where they lie, through the mover. Returns (queued, in use)."""
    nodes = [
        n
        for keys in found.values()
        for k in keys
        if (n := e.index.get(k)) is not None and (tenant is None or n.tag == tenant)
    ]
    _, busy = _erase_nodes(e, nodes)
    skip = {n.key for n in nodes if n.key in e.index}  # in use: marked expired, deleted on release
    queued = 0
    for t, keys in found.items():
        slot = e.slots[t]
        for key in keys:
            if key in skip and (slot.holds(key) or key in slot.owners):
                continue  # the copy the holder reads: deleted on release. An orphan copy no slot
            e.placement._drop(t, key, erase=True)  # charges (seed 200252) goes now: the sweep never sees it
            e.placement.mark_erased(key, t)
            if slot.holds(key) or key in slot.owners:
                slot.drop(key)
            queued += 1
    return queued, busy


def _erase_stored(e: Engine, tenant: str | None, rounds: int = 3, failed: set[int] | None = None) -> tuple[int, bool]:
    """Outside the lock: search each persistent tier's storage for the tenant's blocks (None: every
    block) by their headers (blocks another process or an earlier run wrote, which this index never
    held), delete them, and search again until none is left. Returns (blocks deleted, verified).
    A tier that cannot be searched is added to ``failed`` (where given; else the search stops);
    the others are still searched and cleaned."""
    deleted, missed = 0, set[int]()
    for _ in range(rounds):
        found: dict[int, list[bytes]] = {}
        for t, slot in enumerate(e.slots):
            if slot.persistent and t not in missed:
                keys = slot.tier.stored_keys_of(None if tenant is None else tenant.encode())
                if keys is None:  # unreachable: nothing can be claimed about it
                    if failed is None:
                        return deleted, False
                    missed.add(t)
                    failed.add(t)
                elif keys:
                    found[t] = keys
        if not found:
            return deleted, not missed
        with e.lock:
            queued, busy = _drop_stored(e, tenant, found)
            e.counters.erased += queued
        deleted += queued
        e.flush()
        if busy:
            return deleted, False
    return deleted, False


def erase_found(e: Engine, nodes: list[Node], found: dict[int, list[bytes]]) -> tuple[list[Hashable], int, int]:
    """Under the lock: erase indexed ``nodes``, then queue the deletes of blocks ``found`` in
    storage (any tenant's: the caller chose them, invalidation.py), counted as erased. Returns
    (keys erased from the index, stored copies queued, blocks in use)."""
    erased, busy = _erase_nodes(e, nodes)
    queued, busy_stored = _drop_stored(e, None, found) if found else (0, 0)
    e.counters.erased += len(erased) + queued
    return erased, queued, busy + busy_stored


def erase_tenant(e: Engine, tenant: str) -> dict[str, Any]:
    with e.lock, e.leaving_as("erased"):
        nodes = [n for n in e.index if n.tag == tenant]
        erased, busy = _erase_nodes(e, nodes)
        for slot_pos, slot in enumerate(e.slots):  # blocks charged to the tenant the index lacks
            for key in slot.tenant_blocks(tenant):
                if key in e.index:  # in use (a match holds it): marked expired, erased on release
                    continue
                e.placement._drop(slot_pos, key, erase=True)  # journaled where refused (engine/tombstones.py)
                slot.drop(key)
                erased.append(key)
                e.placement.mark_erased(key, slot_pos)
        mover = e.placement.mover
        for m in mover.leaving_of(tenant):  # uncharged, on its way out: should that delete be
            src = m.src  # refused, the block is charged again, unmarked; an erasure's delete follows
            if src is None or m.key in e.index or any(q.erase for q in mover.outstanding(m.key, src)):
                continue
            e.placement._drop(src, m.key, erase=True)  # journaled where refused (tombstones)
            e.placement.mark_erased(m.key, src)
            erased.append(m.key)
        e.counters.erased += len(erased)
    failed: set[int] = set()  # tiers that could not be searched
    verified = _verify(e, erased, failed) and busy == 0
    stored, clean = _erase_stored(e, tenant, failed=failed)
    verified = verified and clean
    tb = tenant.encode()
    with e.lock:  # blocks a tier it could not search may still hold: never discovered there until verified
        if failed:
            e.placement.unverified[tb] = failed
        else:
            e.placement.unverified.pop(tb, None)
    if e.journal is not None:  # and not after a restart either (engine/journal.py)
        if failed:
            e.journal.add((), {tb: {e.slots[t].name for t in failed}})
        else:
            e.journal.remove((), [tb])
    out = {"tenant": tenant, "erased_blocks": len(erased) + stored, "found_in_storage": stored, "in_use": busy,
           "verified": verified}  # fmt: skip
    audit.info(
        "erase tenant=%s blocks=%d found_in_storage=%d in_use=%d verified=%s",
        tenant, len(erased) + stored, stored, busy, verified,
    )  # fmt: skip
    return out


def flush_all(e: Engine) -> dict[str, Any]:
    """Every unpinned block of every tenant, from every tier (like vLLM's reset_prefix_cache)."""
    with e.lock, e.leaving_as("erased"):
        erased, busy = _erase_nodes(e, list(e.index))
        for t, slot in enumerate(e.slots):  # orphans: blocks of earlier runs the index lacks
            for key in list(slot.owners):
                e.placement._drop(t, key)
                slot.drop(key)
                erased.append(key)
        e.counters.erased += len(erased)
    verified = _verify(e, erased) and busy == 0
    stored, clean = _erase_stored(e, None)  # shared storage: blocks other processes wrote
    verified = verified and clean
    audit.info(
        "flush blocks=%d found_in_storage=%d in_use=%d verified=%s", len(erased) + stored, stored, busy, verified
    )
    return {"erased_blocks": len(erased) + stored, "found_in_storage": stored, "in_use": busy, "verified": verified}


def _stored(e: Engine, key: Hashable) -> bool:
    """Under the lock: whether a tier may still hold ``key``, a block the index no longer has (its
    eviction's delete refused: charged again as an orphan, or still queued). Its deadline is all
    that keeps discovery from serving it after its TTL: it is erased as an indexed one would be."""
    mover = e.placement.mover
    for t, slot in enumerate(e.slots):
        if slot.holds(key) or key in slot.owners or (slot.slow and mover.leaving(key, t)):
            return True
        if not slot.slow and key in slot.tier:
            return True
        if _orphan_copy(slot, key):  # an uncharged copy: an earlier run's (seed 201097)
            return True
    return False


def _due(e: Engine, now: float) -> list[Hashable]:
    """Expired keys to reclaim: the heap's, and once no persistent tier is down the keys ``held``
    expired meanwhile (``_unanswered``; each still expired: a store may have renewed it since)."""
    due = e.expiry.due(now, SWEEP_BATCH)
    held = e.expiry.held
    if held and not any(s.persistent and not s.tier.healthy for s in e.slots):
        back = [k for k in held if e.expiry.expired(k, now)]
        held.clear()
        seen = set(back)
        due = [*back, *(k for k in due if k not in seen)]
    return due


def sweep(e: Engine, now: float) -> int:
    """Reclaim expired blocks: O(log n) each (heap pops), never a scan of live blocks."""
    if not len(e.expiry):
        return 0
    done = 0
    with e.lock, e.leaving_as("expired"):
        later: list[tuple[Hashable, float, int]] = []
        for key in _due(e, now):
            node = e.index.get(key)
            if node is None and not _stored(e, key):
                if _unanswered(e, key):  # kept expired, so discovery never takes a copy there once
                    e.expiry.hold(key, now)  # it is back; taken again then (seed 300599)
                else:
                    e.expiry.forget(key)
                continue
            if key in e.pins:  # a TTL is a limit on how long data is kept: it wins over a pin
                e.pins.drop_covering([key])
            if _erase_key(e, key):
                done += 1
                if _unanswered(e, key):
                    e.expiry.hold(key, now)
            else:  # pinned, or a parent whose children have not expired yet: retry next sweep
                later.append((key, e.expiry.deadline[key], 0 if node is None else node.depth))
        for key, d, depth in later:
            e.expiry.set(key, d, depth)
        e.counters.expired += done
    return done
