"""Storage tiers and the registry that maps a config ``kind`` to a class."""

from __future__ import annotations

from .base import Tier
from .memory import MemoryTier, payload_nbytes

TIERS: dict[str, type[Tier]] = {"memory": MemoryTier}

__all__ = ["TIERS", "MemoryTier", "Tier", "payload_nbytes"]
