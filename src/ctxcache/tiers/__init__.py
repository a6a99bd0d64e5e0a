"""Storage tiers (storage only: they import codec, errors and units, nothing above) and the
registry that maps a config ``kind`` to a class. Building tiers from a config is the engine's
job (``engine/factory.py``)."""

from __future__ import annotations

from .base import NO_META, BlockMeta, Tier
from .blob import BlobTier
from .disk import DiskTier
from .memory import MemoryTier, payload_nbytes
from .redis import RedisTier

TIERS: dict[str, type[Tier]] = {"memory": MemoryTier, "disk": DiskTier, "redis": RedisTier}

__all__ = [
    "NO_META",
    "TIERS",
    "BlobTier",
    "BlockMeta",
    "DiskTier",
    "MemoryTier",
    "RedisTier",
    "Tier",
    "payload_nbytes",
]
