"""Placement at start and at shutdown: trimming persistent tiers to the limits configured now, and
spilling RAM down (engine/core.py calls these under the engine's lock)."""

from __future__ import annotations

from ..errors import PayloadError
from .placement import Placement


def trim(pl: Placement, t: int) -> None:
    """Start-up: bring persistent tier ``t`` within each tenant's quota, then its capacity.

    A restart may find more than they allow (a lowered quota, files of a larger setup). The
    excess leaves now, by the road a store's excess takes (the policy picks, oldest first as
    learned at start; a lower tier takes what it has room for; the rest is evicted, counted
    as quota evictions), not at the tenant's next write here: a tenant that only reads would
    hold more than its quota, which is a promise to the other tenants, for as long as it ran."""
    slot = pl.slots[t]
    for tenant, quota in slot.quotas.items():
        over = slot.tenant_used(tenant) - quota
        if over > 0:
            pl.make_room(t, over, only=tenant)
    if slot.used() > slot.capacity:
        pl.make_room(t, slot.used() - slot.capacity)


def spill(pl: Placement, t: int) -> int:
    """Shutdown: demote the unpinned blocks of RAM tier ``t`` one tier down (never evict them).

    Returns how many moved; it stops early when the write buffer is full, so the caller
    waits for the mover and calls again until nothing moves.
    """
    tier = pl.tiers[t]
    moved = 0
    for key in list(tier.keys()):
        node = pl.index.get(key)
        if node is None or node.tier != t or node.pins or key in pl.mover.pending:
            continue
        try:
            if not pl._demote(t, key, node):
                break
        except PayloadError:  # a hot payload the slow tier's codec cannot encode: it stays
            continue
        pl.slots[t].drop(key)
        moved += 1
    return moved
