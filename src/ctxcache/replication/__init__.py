"""Regions: metadata (erasures, invalidations, TTLs, pins, semantic erasures and feedback)
replicated between regions with sparse vector clocks; docs/regions.md has the model and rules."""

from .clock import SparseClock
from .effects import CacheEffects, Follower
from .log import LinkDown, MemoryLog, RedisLog, RegionLog
from .ops import KINDS, Update
from .replicator import Replicator
from .state import KeyState, RegionState

__all__ = [
    "KINDS", "CacheEffects", "Follower", "KeyState", "LinkDown", "MemoryLog", "RedisLog", "RegionLog",
    "RegionState", "Replicator", "SparseClock", "Update",
]  # fmt: skip
