"""Slot: one tier, its eviction policy, its limits and its counters. The only code that changes
a tier's accounting.

The tier stores and measures blocks; the slot decides nothing either, but it is where every event
about a tier is recorded: a key becoming resident (``admit``), used (``touch``), leaving
(``drop``), chosen as a victim (``victim``), bytes reserved by queued writes (``reserve``) and
released by queued deletes. Placement and the lookup call these; nobody reaches into
``slot.policy`` or a counter from outside. Per-tier quotas (tenancy) belong here too.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, fields
from typing import Any

from ..codec import Codec
from ..policies import Policy
from ..tiers import Tier


@dataclass(slots=True)
class Counters:
    """The engine's event counters, by owner: the lookup (``lookups`` .. ``lookup_tokens``), the
    store (``stores`` .. ``rejected``) and placement (``evictions`` .. ``write_errors``). Each
    field is changed by exactly one of them."""

    lookups: int = 0
    stores: int = 0
    hits: int = 0
    misses: int = 0
    hit_tokens: int = 0
    lookup_tokens: int = 0
    stored_blocks: int = 0
    evictions: int = 0
    demotions: int = 0
    demotions_skipped: int = 0
    promotions: int = 0
    discovered: int = 0
    lost: int = 0
    repaired: int = 0
    write_errors: int = 0
    collisions: int = 0
    rejected: int = 0

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Slot:
    """Tier ``pos`` of the engine. Not thread-safe: called under the engine's lock."""

    __slots__ = (
        "pos", "tier", "policy", "name", "capacity", "high", "low", "slow", "persistent", "kind",
        "hits", "evictions", "inflow", "outflow",
    )  # fmt: skip

    def __init__(self, pos: int, tier: Tier, policy: Policy) -> None:
        self.pos = pos
        self.tier = tier
        self.policy = policy
        self.name, self.kind = tier.name, tier.kind
        self.capacity, self.high, self.low = tier.capacity, tier.high, tier.low
        self.slow, self.persistent = tier.slow, tier.persistent
        self.hits = 0
        self.evictions = 0
        self.inflow = 0  # bytes of writes queued into this tier
        self.outflow = 0  # bytes of blocks queued to leave it

    @property
    def codec(self) -> Codec | None:
        return self.tier.codec

    # --- bytes -----------------------------------------------------------------------------------
    def used(self) -> int:
        """Logical bytes: what the tier holds, plus queued writes into it, minus queued deletes."""
        return self.tier.used_bytes + self.inflow - self.outflow

    def free(self) -> int:
        return self.capacity - self.used()

    def over_high(self) -> int:
        """Bytes to free to come back down to the low watermark, once above the high one (else 0)."""
        used = self.used()
        return used - int(self.low * self.capacity) if used > self.high * self.capacity else 0

    def reserve(self, inflow: int, outflow: int) -> None:
        """Charge (positive) or settle (negative) bytes of queued moves."""
        self.inflow += inflow
        self.outflow += outflow

    # --- the policy's view of residency ----------------------------------------------------------
    def admit(self, key: Hashable) -> None:
        self.policy.on_insert(key)

    def admit_chain(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self.policy.on_insert(key)

    def touch(self, keys: list[Hashable]) -> None:
        """Hits, deepest first (callers pass them so): ancestors end up more recently used."""
        self.policy.on_hits(keys)
        self.hits += len(keys)

    def drop(self, key: Hashable) -> None:
        self.policy.on_remove(key)

    def holds(self, key: Hashable) -> bool:
        return key in self.policy

    def victim(self, can_evict: Callable[[Any], bool]) -> Hashable | None:
        return self.policy.evict(can_evict)

    def evicted(self) -> None:
        self.evictions += 1

    def stats(self) -> dict[str, Any]:
        out = self.tier.stats()
        out.update(policy=self.policy.name, capacity=self.capacity, hits=self.hits, evictions=self.evictions)
        return out
