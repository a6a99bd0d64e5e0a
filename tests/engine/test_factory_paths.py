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


def test_two_tiers_of_one_kind_get_names_of_their_own_and_a_name_given_twice_is_refused():
    """Events, metrics, quotas and usage name a tier by its name: two unnamed RAM tiers were one."""
    c = cache({"kind": "memory", "capacity": "1MiB"}, {"kind": "memory", "capacity": "2MiB"},
              {"kind": "memory", "capacity": "3MiB", "name": "memory-2"})  # fmt: skip
    assert [s.name for s in c._engine.slots] == ["memory", "memory-3", "memory-2"]
    with pytest.raises(ConfigError, match=r"tiers\[1\]: the name 'hot' is taken by an earlier tier"):
        cache(
            {"kind": "memory", "capacity": "1MiB", "name": "hot"}, {"kind": "memory", "capacity": "1MiB", "name": "hot"}
        )
