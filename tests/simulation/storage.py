"""Invariants checked when the mover is idle: what each tier stores, charges and indexes agree."""

from __future__ import annotations

from ctxcache.engine import Engine
from ctxcache.engine.placement import LOST
from ctxcache.tiers.base import key_bytes

from .model import Model, Violation
from .simtiers import SimDisk, SimRedis


def check_idle(e: Engine, model: Model) -> None:
    mover = e.placement.mover
    if mover.pending or mover.buffered or mover._leaving:
        raise Violation(f"idle mover still has pending {len(mover.pending)}, buffered {mover.buffered} B, "
                        f"leaving {dict(mover._leaving)}")  # fmt: skip
    for pos, s in enumerate(e.slots):
        if s.inflow or s.outflow:
            raise Violation(f"tier {s.name}: idle but inflow {s.inflow}, outflow {s.outflow}")
        if s.retrying:
            raise Violation(f"tier {s.name}: {len(s.retrying)} blocks still 'retrying' with no delete outstanding")
        for key in s.owners.keys():  # noqa: SIM118 - a ShardedDict
            if not s.holds(key):
                raise Violation(f"tier {s.name}: charges a block its policy does not hold")
        if len(s.policy) != len(s.owners):
            raise Violation(f"tier {s.name}: policy holds {len(s.policy)} blocks, the slot charges {len(s.owners)}")
        _check_storage(s, pos, model)
        _check_limits(s, model)
    for node in e.index:
        if node.tier != LOST and node.key not in e.slots[node.tier].owners:
            raise Violation(f"a block indexed in tier {e.slots[node.tier].name} is not charged there")


def _check_storage(s, pos: int, model: Model) -> None:  # type: ignore[no-untyped-def]
    tier = s.tier
    charged = {key_bytes(k): n for k, n in ((k, tier.nbytes(k)) for k in tier.keys())}  # noqa: SIM118 - a Tier
    owners = {key_bytes(k) for k in s.owners.keys()}  # noqa: SIM118
    if set(charged) != owners:
        raise Violation(f"tier {s.name}: the tier charges {len(charged)} blocks, the slot {len(owners)} "
                        f"({len(set(charged) - owners)} only in the tier, {len(owners - set(charged))} only in the slot)")  # fmt: skip
    if not isinstance(tier, (SimDisk, SimRedis)):
        return
    stored = tier.stored()
    for kb, n in charged.items():
        if kb not in stored:
            raise Violation(f"tier {s.name}: charges a block ({n} B) storage no longer holds")
        if len(stored[kb]) != n:
            raise Violation(f"tier {s.name}: charges {n} B for a block of {len(stored[kb])} B")
    leaked = set(stored) - set(charged) - model.orphans.get(pos, set())
    if leaked:
        raise Violation(f"tier {s.name}: {len(leaked)} blocks in storage that nothing charges (orphans)")


def _check_limits(s, model: Model) -> None:  # type: ignore[no-untyped-def]
    """Within capacity and quotas but for blocks a refused delete kept (docs/storage.md)."""
    kept = model.kept
    excess: dict[str, int] = {}
    for key, (tenant, n) in s.owners.items():
        if key_bytes(key) in kept:
            excess[tenant] = excess.get(tenant, 0) + n
    if s.used() > s.capacity + sum(excess.values()):
        raise Violation(f"tier {s.name}: {s.used()} B over its capacity {s.capacity} (refusals keep "
                        f"{sum(excess.values())} B)")  # fmt: skip
    for tenant, quota in s.quotas.items():
        if s.tenant_used(tenant) > quota + excess.get(tenant, 0):
            raise Violation(f"tier {s.name}: tenant {tenant!r} holds {s.tenant_used(tenant)} B over its quota {quota}")
