"""Per-request token accounting, the numbers later served as ``cache_read_input_tokens`` etc."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Usage:
    """Tokens of one request by where they came from.

    cache_read_tokens: served from the cache (the prefix that was not prefilled).
    cache_creation_tokens: newly written to the cache by this request.
    uncached_tokens: prompt tokens that were not served from the cache (they were prefilled).
    by_tier: cache_read_tokens split by the tier that served them.
    """

    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    uncached_tokens: int = 0
    by_tier: dict[str, int] = field(default_factory=dict)

    def __add__(self, other: Usage) -> Usage:
        tiers = dict(self.by_tier)
        for k, v in other.by_tier.items():
            tiers[k] = tiers.get(k, 0) + v
        return Usage(
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_creation_tokens + other.cache_creation_tokens,
            self.uncached_tokens + other.uncached_tokens,
            tiers,
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "cache_read_tokens": self.cache_read_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "uncached_tokens": self.uncached_tokens,
            "by_tier": dict(self.by_tier),
        }
