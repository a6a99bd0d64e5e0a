"""Tombstones: erased or expired blocks that a refused delete kept in a persistent tier must not
come back after a restart.

In memory, ``Placement.erased`` keeps such a block from being discovered again until its delete
lands; it dies with the process. So each persistent tier keeps a small journal of those keys
(``BlobTier.bury``: disk a file in its directory, Redis a set beside the blocks): written by the
mover when an erasure's or a TTL's delete is refused there (``Move.erase``), and at ``close``
for every erased key the tier still holds (a journal write refused earlier gets another chance)
and every block erased or expired while pinned (a held match the sweep had to wait for);
a tombstone goes when a delete of its key lands there. At start (``restore``) a tier's tombstoned
blocks are not adopted: they are marked erased (never discovered) and their deletes queued again.

The rule that makes an erasure win a restart: a tier's tombstones, and the keys the engine's own
erasure journal (engine/journal.py, a local file, when configured: written with every refused
erasure delete and at close) names for that tier, are not adopted there at start; so are the blocks a tier
found of a tenant the journal names unverified in that tier (an erasure of it could not search
there). None of them is adopted or discovered before its delete lands. A tombstone whose key is
erased nowhere at close (its blob deleted, or overwritten by a block stored anew) goes.
Without a journal, a tombstone write the tier refuses too (down through the close) is lost, and
so is a journal the next run cannot read; such a block may then be served again (docs/storage.md).
Bounded by ``MAX_TOMBSTONES`` per tier (tiers/blob.py) and ``journal.MAX_ENTRIES``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from ..errors import DeleteFailedError
from ..tiers import Tier
from ..tiers.base import key_bytes
from .moves import vanished

if TYPE_CHECKING:
    from .core import Engine
    from .mover import Move, Mover


def dead_keys(e: Engine) -> dict[int, set[bytes]]:
    """At start, before the tiers' blocks are adopted: per persistent tier, the keys it must not
    adopt and deletes again (``restore``): its tombstones and the erasure journal's keys naming it
    (a tier that refused its own tombstone has it in the engine's journal), and the blocks a tier found of a tenant the journal names unverified (an erasure of it
    could not search every tier: they may be what it missed). Those tenants are unverified again."""
    pl, journal = e.placement, e.journal
    if journal is not None:
        for tenant, names in journal.tenants.items():
            pl.unverified.setdefault(tenant, set()).update(t for t in pl.persistent if e.slots[t].name in names)
    out = {}
    for t in pl.persistent:
        tier, name = e.tiers[t], e.slots[t].name
        found = tier.tombstones()
        if journal is not None:
            found |= {k for k, names in journal.keys.items() if name in names}
        missed = {key_bytes(k) for k in tier.keys() if t in pl.unverified.get(tier.tenant_of(k), ())}  # noqa: SIM118
        out[t] = found | missed
    return out


def restore(e: Engine, dead: dict[int, set[bytes]]) -> None:
    """Under the lock, at start: each tombstoned block is erased again (its delete queued; until it
    lands, never discovered)."""
    pl = e.placement
    for t, keys in dead.items():
        for kb in sorted(keys):
            pl.mark_erased(kb, t)
            pl._drop(t, kb, erase=True)


def delete(mover: Mover, tier: Tier, gone: Sequence[Move], sizes: list[int]) -> None:
    """The mover, outside the lock: delete ``gone`` from ``tier``, then journal what was refused."""
    _send(tier, gone, sizes)
    settle(mover, tier, gone)


def _send(tier: Tier, gone: Sequence[Move], sizes: list[int]) -> None:
    """Delete the batch's blocks from ``tier``; a block whose delete raises gets ``kept``.

    A tier that names the deletes that failed (DeleteFailedError: a Redis Cluster with one
    master down) is taken at its word: only those are kept, the rest landed (one refusal per key
    it names: a key asked twice in a batch, an eviction's delete and a TTL's behind it, is gone
    when either landed, and then neither keeps it; so in the retries below). When the call
    raises anything else, each key is tried once more on its own: the call may have stopped at
    its first failure, and deleting again what it did delete is a no-op. A retry that raises
    too is asked whether the block is still there (a read that tells gone from out of reach):
    the batch call may have deleted it before it failed, and a block charged as kept then was
    charged with nothing stored (a flaky disk refusing the second unlink of a file gone)."""
    try:
        tier.delete_many([m.key for m in gone])
        return
    except DeleteFailedError as exc:
        failed = list(exc.failed)  # one entry per refused delete: a key asked twice may have landed once
        for m, size in zip(gone, sizes):
            if m.key in failed:  # one the tier no longer charges may be gone (a lookup read it
                failed.remove(m.key)  # corrupt meanwhile and dropped it): asked, as below (seed 306272)
                m.kept = None if m.key not in tier and vanished(m, tier) else size
    except Exception:  # noqa: BLE001 - a failing backend must not fail the batch's other deletes
        for m, size in zip(gone, sizes):
            try:
                tier.delete(m.key)
            except Exception:  # noqa: BLE001 - still in storage: placement charges it again
                m.kept = None if vanished(m, tier) else size
    landed = {m.key for m in gone if m.kept is None}  # another delete of a key in the batch (an
    for m in gone:  # erasure's behind an eviction's) landed: nothing is kept, nothing charged again
        if m.kept is not None and m.key in landed:  # (seeds 302132, 301772)
            m.kept = None


def settle(mover: Mover, tier: Tier, gone: Sequence[Move]) -> None:
    """Outside the lock, after the mover sent deletes from ``tier``: journal the erasures it refused
    (in the tier, and in the engine's journal: the tier may refuse that write too), forget the
    tombstones of those that landed; the engine's journal forgets a key once no tier holds it and
    no later move of it is queued."""
    if not tier.persistent:
        return
    journal = mover.journal
    refused = [m.key for m in gone if m.kept is not None and m.erase]
    if refused:
        tier.bury(refused)
        if journal is not None:
            journal.add((k, tier.name) for k in refused)
    tier.unbury(m.key for m in gone if m.kept is None)
    if journal is not None and journal.keys:
        journal.remove((m.key, tier.name) for m in gone if m.kept is None)


def persist(e: Engine) -> None:
    """At close, the mover stopped: every erased key a persistent tier still holds is journaled, and
    every block erased or expired while a request held it (its deadline passed, the sweep could not
    take it: still pinned at close, it would be adopted by the next run and served). A tombstone
    whose key is erased nowhere any more (its blob deleted, or written over by a block stored anew
    since: ``Placement.unmark_erased``) goes: kept, the next run would delete that new block."""
    now = e.clock()
    erased = e.placement.erased
    due = [k for k, d in e.expiry.deadline.items() if d <= now]
    keep: list[tuple[Hashable, str]] = []  # (key, tier name): an erased blob that tier may keep
    for t in e.placement.persistent:
        tier, name = e.tiers[t], e.slots[t].name
        marked = [k for k, ts in erased.items() if t in ts]
        # an expired block it may keep uncharged (an earlier run's copy: erasure.py ``_orphan_copy``),
        # or may keep at all when down (its filter cannot answer): found after the restart, it was
        maybe = tier.might_contain_many(due) if tier.healthy else [True] * len(due)  # served (302040, 303035)
        keys = [k for k in marked if k in tier] + [k for k, m in zip(due, maybe) if m or k in tier]
        if keys:
            tier.bury(keys)
        keep += [(k, name) for k in {*marked, *keys}]
        live = {key_bytes(k) for k in (*marked, *due)}
        stale = [k for k in tier.buried() if k not in live]
        if stale:
            tier.unbury(stale)
    journal = e.journal
    if journal is not None:  # also a journal write that failed earlier gets another chance
        journal.add(keep, unverified_names(e))
        wanted = {(key_bytes(k), n) for k, n in keep}
        journal.remove([(k, n) for k, names in list(journal.keys.items()) for n in names if (k, n) not in wanted])


def unverified_names(e: Engine) -> dict[bytes, set[str]]:
    """``Placement.unverified`` with tier names (the journal outlives the tiers' order)."""
    return {tenant: {e.slots[t].name for t in ts} for tenant, ts in e.placement.unverified.items() if ts}
