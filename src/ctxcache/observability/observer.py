"""CacheObserver: the indicators of one cache, fed by block events and counter samples.

The cache (or the simulator) tells the observer when a block enters or leaves and why; the
observer keeps only windows (never a second copy of a cache counter) and answers ``snapshot()``
with the three indicators and the window's eviction breakdown.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from .indicators import AgeSkew, Clock, EvictionEntropy, HitRateSlope, sample_skewness


@dataclass(frozen=True)
class Snapshot:
    hit_rate_slope_pct_per_min: float
    eviction_entropy: float
    context_age_skew: float
    evictions_in_window: int
    eviction_rate_per_s: float
    resident_blocks_tracked: int
    mean_age_s: float
    window_s: float

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class CacheObserver:
    """Sliding-window indicators of one cache. Thread-safe enough for one writer per method:
    events arrive under the cache's lock; scrapes read copies."""

    def __init__(self, clock: Clock = time.monotonic, window_s: float = 600.0, age_sample_mask: int = 0) -> None:
        self.clock, self.window_s = clock, window_s
        self.slope = HitRateSlope(clock, window_s)
        self.entropy = EvictionEntropy(clock, window_s)
        self.ages = AgeSkew(clock, sample_mask=age_sample_mask)

    # --- events (from the cache, under its lock) -----------------------------------------------------
    def block_inserted(self, key: Hashable) -> None:
        self.ages.inserted(key)

    def block_evicted(self, key: Hashable, group: Hashable) -> None:
        """A block left the cache for good (not a demotion to a slower tier)."""
        self.ages.removed(key)
        self.entropy.observe(group)

    def block_dropped(self, key: Hashable) -> None:
        """A block left without an eviction decision (erased by a caller, replaced): ages only."""
        self.ages.removed(key)

    def sample(self, hit_tokens: int, lookup_tokens: int) -> None:
        """Cumulative token counters, read from the cache (at scrape time or on a timer)."""
        self.slope.sample(hit_tokens, lookup_tokens)

    # --- reading ---------------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        entropy, n = self.entropy.summary()
        ages = self.ages.ages()
        return Snapshot(
            hit_rate_slope_pct_per_min=self.slope.value(),
            eviction_entropy=entropy,
            context_age_skew=sample_skewness(ages),
            evictions_in_window=n,
            eviction_rate_per_s=n / self.window_s,
            resident_blocks_tracked=len(self.ages),
            mean_age_s=sum(ages) / len(ages) if ages else 0.0,
            window_s=self.window_s,
        )
