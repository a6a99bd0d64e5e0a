"""What a slow tier's refused delete leaves to do, for ``Placement._moved`` (the mover's report,
under the engine's lock): free the bytes the pass counted as freed from other victims, or charge
the block again where storage still holds it."""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .mover import Move
    from .placement import Placement


def refused_again(pl: Placement, t: int, key: Hashable, nbytes: int) -> None:
    """A retried delete from tier ``t`` was refused again: the pass that took it counted its
    ``nbytes`` as freed. They are freed now from other victims, as far as the block's owner's
    quota and the tier's capacity need them (not more: excess other refusals left is the next
    pass's). Once per retry (refused again, the block is no retry: it waits for its policy's
    turn), so a tier that keeps refusing ends."""
    slot = pl.slots[t]
    if slot.broken:  # the tier refuses deletes: the room waits for its breaker's next probe
        return
    owner = slot.owner(key)
    quota = slot.quotas.get(owner) if owner is not None else None
    if owner is not None and quota is not None and slot.tenant_used(owner) > quota:
        pl.make_room(t, min(nbytes, slot.tenant_used(owner) - quota), only=owner)
    if slot.used() > slot.capacity:
        pl.make_room(t, min(nbytes, slot.used() - slot.capacity))


def adopt_kept(pl: Placement, m: Move) -> bool:
    """A delete from slow tier ``m.src`` raised: the block is still stored. True when it is
    charged again to its owner (as a block found at start: capacity and quota count what
    storage holds). No pass starts here."""
    assert m.src is not None  # counted as a delete error by the caller
    slot = pl.slots[m.src]  # not if a newer write of the key here came first; only persistent tiers adopt
    if m.kept and slot.persistent and not slot.holds(m.key):
        if pl.mover.hand_on(m):
            return False  # a delete of it queued behind (an erasure's) frees it
        slot.tier.adopt(m.key, m.kept)
        slot.admit(m.key, m.kept, m.owner)
        return True
    if m.kept and slot.persistent:
        pl.mover.hand_on(m)  # a newer write of it here is queued: it replaces the kept blob
    return False
