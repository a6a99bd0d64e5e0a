"""Building tiers from config: the smallest capacity a tier may have (one block of token ids), and
the refusal of an unknown kind naming the tier and the kinds there are (mutation testing found
the boundary unchecked, and the kind list checked only outside the engine's tests)."""

from __future__ import annotations

import pytest

from ctxcache import ContextCache
from ctxcache.errors import ConfigError, UnknownTierError


def cache(*tiers: dict[str, object]) -> ContextCache:
    return ContextCache.from_config({"block_size": 4, "tiers": list(tiers)})


def test_a_tier_may_be_as_small_as_one_blocks_token_ids_and_no_smaller():
    assert cache({"kind": "memory", "capacity": 16}).slots[0].capacity == 16  # 4 tokens x 4 B
    with pytest.raises(ConfigError, match=r"tiers\[0\] capacity 15 B is smaller than one block .*at least 16 B"):
        cache({"kind": "memory", "capacity": 15})


def test_an_unknown_tier_kind_names_the_tier_and_the_known_kinds():
    with pytest.raises(UnknownTierError, match=r"^tiers\[1\]: unknown kind 'tape'; known: memory, disk, redis$"):
        cache({"kind": "memory", "capacity": "1MiB"}, {"kind": "tape", "capacity": "1MiB"})
