"""Fairness: in which order tenants' blocks leave a full tier.

When a tier needs room, victims are taken in stages, each a filter on the block's owner that
``Placement.make_room`` combines with its usual veto (pins, parents, blocks in flight), and the
tier's own policy orders victims inside a stage:

1. blocks of tenants over their share of the tier (their quota there, or else capacity times
   their eviction weight over the weights of the tenants present), and blocks of unknown owner;
2. best-effort (class 2) blocks;
3. SLO (class 1) blocks;
4. class-0 (system / pinned) blocks whose TTL has run out. Live class-0 blocks never leave.

A flooding tenant thus pushes out its own blocks first, whatever its class.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from .slot import ORPHAN, Slot
from .tenancy import Tenancy

Filter = Callable[[Any], bool]


class Fairness:
    def __init__(self, tenancy: Tenancy, expired: Callable[[Hashable], bool]) -> None:
        self.tenancy = tenancy
        self.expired = expired

    def over_share(self, slot: Slot) -> set[str]:
        """Tenants holding more of ``slot`` than their share."""
        present = slot.by_tenant
        weights = {tn: self._weight(tn) for tn in present}
        total = sum(weights.values()) or 1.0
        over = set()
        for tn, used in present.items():
            share = slot.quotas.get(tn)
            if share is None:
                share = int(slot.capacity * weights[tn] / total)
            if used > share or tn == ORPHAN:
                over.add(tn)
        return over

    def _weight(self, tenant: str) -> float:
        t = self.tenancy.tenants.get(tenant)
        return t.weight if t is not None else 1.0

    def stages(self, slot: Slot) -> list[Filter | None]:
        owner, prio, expired = slot.owner, self.tenancy.priority, self.expired
        over = self.over_share(slot)
        classes = {prio(tn) for tn in slot.by_tenant}

        def over_share(k: Any) -> bool:
            tn = owner(k)
            return tn in over and (prio(tn or ORPHAN) != 0 or expired(k))

        def of_class(c: int) -> Filter:
            return lambda k: prio(owner(k) or ORPHAN) == c

        def expired_pinned(k: Any) -> bool:
            return prio(owner(k) or ORPHAN) == 0 and expired(k)

        out: list[Filter | None] = [over_share] if over else []
        out += [of_class(c) for c in (2, 1) if c in classes]
        if 0 in classes:
            out.append(expired_pinned)
        return out
