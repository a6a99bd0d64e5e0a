"""Storage tiers and the registry that maps a config ``kind`` to a class."""

from __future__ import annotations

import inspect
from typing import Any

from ..config import TierConfig
from ..errors import ConfigError, UnknownTierError
from ..policies import make_policy
from .base import NO_META, BlockMeta, Tier
from .disk import DiskTier
from .memory import MemoryTier, payload_nbytes
from .redis import RedisTier

TIERS: dict[str, type[Tier]] = {"memory": MemoryTier, "disk": DiskTier, "redis": RedisTier}


def make_tier(i: int, tc: TierConfig, block_size: int, clock: Any) -> Tier:
    """Build tier ``i`` of a config, with errors that name the tier and list the keys it takes."""
    tier_cls = TIERS.get(tc.kind)
    if tier_cls is None:
        raise UnknownTierError(f"tiers[{i}]: unknown kind {tc.kind!r}; known: {', '.join(TIERS)}")  # fastest first
    min_bytes = block_size * 4
    if tc.capacity < min_bytes:
        raise ConfigError(
            f"tiers[{i}] capacity {tc.capacity} B is smaller than one block "
            f"({block_size} tokens need at least {min_bytes} B)"
        )
    policy = make_policy(tc.policy, clock=clock)
    if getattr(policy, "offline", False):
        raise ConfigError(f"tiers[{i}]: policy {policy.name!r} needs the future; it runs in the simulator only")
    known = {p for c in tier_cls.__mro__ if issubclass(c, Tier) for p in inspect.signature(c).parameters}
    unknown = set(tc.options) - known
    if unknown:
        raise ConfigError(
            f"tiers[{i}] ({tc.kind}): unknown keys {sorted(unknown)}; "
            f"known: {sorted(known - {'capacity', 'policy', 'kw', 'high', 'low'})}"
        )
    try:
        return tier_cls(tc.capacity, policy, high=tc.high, low=tc.low, **tc.options)
    except TypeError as exc:
        raise ConfigError(f"tiers[{i}] ({tc.kind}): {exc}") from None


__all__ = [
    "NO_META",
    "TIERS",
    "BlockMeta",
    "DiskTier",
    "MemoryTier",
    "RedisTier",
    "Tier",
    "make_tier",
    "payload_nbytes",
]
