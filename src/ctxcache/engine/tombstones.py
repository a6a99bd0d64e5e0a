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

What it cannot do: a journal write the tier refuses too (down through the close) is lost, and so
is a journal the next run cannot read; such a block may then be served again (docs/storage.md).
Bounded by ``MAX_TOMBSTONES`` per tier (tiers/blob.py); a tenant erased while a tier could not be
searched (``Placement.unverified``) is not journaled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import DeleteFailedError
from ..tiers import Tier
from .moves import vanished

if TYPE_CHECKING:
    from .core import Engine
    from .mover import Move


def dead_keys(tier: Tier) -> set[bytes]:
    """At start, before the tier's blocks are adopted: its tombstones (none for other tiers)."""
    return tier.tombstones() if tier.persistent else set()


def restore(e: Engine, dead: dict[int, set[bytes]]) -> None:
    """Under the lock, at start: each tombstoned block is erased again (its delete queued; until it
    lands, never discovered)."""
    pl = e.placement
    for t, keys in dead.items():
        for kb in sorted(keys):
            pl.erased.add(kb)
            pl._drop(t, kb, erase=True)


def delete(tier: Tier, gone: Sequence[Move], sizes: list[int]) -> None:
    """The mover, outside the lock: delete ``gone`` from ``tier``, then journal what was refused."""
    _send(tier, gone, sizes)
    settle(tier, gone)


def _send(tier: Tier, gone: Sequence[Move], sizes: list[int]) -> None:
    """Delete the batch's blocks from ``tier``; a block whose delete raises gets ``kept``.

    A tier that names the deletes that failed (DeleteFailedError: a Redis Cluster with one
    master down) is taken at its word: only those are kept, the rest landed. When the call
    raises anything else, each key is tried once more on its own: the call may have stopped at
    its first failure, and deleting again what it did delete is a no-op. A retry that raises
    too is asked whether the block is still there (a read that tells gone from out of reach):
    the batch call may have deleted it before it failed, and a block charged as kept then was
    charged with nothing stored (a flaky disk refusing the second unlink of a file gone)."""
    try:
        tier.delete_many([m.key for m in gone])
        return
    except DeleteFailedError as exc:
        failed = set(exc.failed)
        for m, size in zip(gone, sizes):
            if m.key in failed:
                m.kept = size
        return
    except Exception:  # noqa: BLE001 - a failing backend must not fail the batch's other deletes
        pass
    for m, size in zip(gone, sizes):
        try:
            tier.delete(m.key)
        except Exception:  # noqa: BLE001 - still in storage: placement charges it again
            m.kept = None if vanished(m, tier) else size


def settle(tier: Tier, gone: Sequence[Move]) -> None:
    """Outside the lock, after the mover sent deletes from ``tier``: journal the erasures it refused,
    forget the tombstones of those that landed."""
    if not tier.persistent:
        return
    refused = [m.key for m in gone if m.kept is not None and m.erase]
    if refused:
        tier.bury(refused)
    tier.unbury(m.key for m in gone if m.kept is None)


def persist(e: Engine) -> None:
    """At close, the mover stopped: every erased key a persistent tier still holds is journaled, and
    every block erased or expired while a request held it (its deadline passed, the sweep could not
    take it: still pinned at close, it would be adopted by the next run and served)."""
    now = e.clock()
    due = [k for k, d in e.expiry.deadline.items() if d <= now]
    for t in e.placement.persistent:
        tier = e.tiers[t]
        keys = [k for k in (*e.placement.erased, *due) if k in tier]
        if keys:
            tier.bury(keys)
