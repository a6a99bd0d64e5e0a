"""Pins across tiers: a block pinned by a Match is never demoted out of the tier that holds it while
the Match is held (only the last tier's rule, "only unpinned leaves leave the index", was tested
before); once released it can be. Checked through ContextCache's public API (a lookup's
``usage.by_tier`` says which tier served each block), for every kind of tier pair.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxcache import ContextCache

BS = 4
BLOCK = 100  # payload bytes; memory tiers charge these


def tiers(setup: str, path: Path, hot_blocks: int = 2) -> list[dict[str, Any]]:
    hot = {"kind": "memory", "capacity": hot_blocks * BLOCK, "high": 1.0, "low": 1.0, "name": "hot"}
    warm = {"kind": "memory", "capacity": 3 * BLOCK, "high": 1.0, "low": 1.0, "name": "warm"}
    disk = {"kind": "disk", "path": str(path), "capacity": "1MiB", "fsync": False, "name": "disk"}
    return {"hot+warm": [hot, warm], "hot+disk": [hot, disk], "hot+warm+disk": [hot, warm, disk]}[setup]


def make(setup: str, path: Path, **top: Any) -> ContextCache:
    return ContextCache.from_config({"block_size": BS, "tiers": tiers(setup, path), **top})


def store(cache: ContextCache, p: int, n: int = 1) -> list[int]:
    toks = [p] * (n * BS)
    with cache.lookup(toks) as m:
        cache.store(toks, [bytes(BLOCK)] * (n - m.n_blocks), first_block=m.n_blocks)
    cache.flush(10)
    return toks


def where(cache: ContextCache, toks: list[int]) -> dict[str, int]:
    """Tiers that serve ``toks`` now (a lookup; with promotion on, a hit may move it up)."""
    with cache.lookup(toks) as m:
        return dict(m.usage.by_tier)


SETUPS = ["hot+warm", "hot+disk", "hot+warm+disk"]


@pytest.mark.parametrize("setup", SETUPS)
def test_a_pinned_block_stays_in_the_top_tier_until_released(setup, tmp_path):
    cache = make(setup, tmp_path)
    a = store(cache, 1)
    m = cache.lookup(a)  # pins A, the oldest block of the top tier
    assert m.usage.by_tier == {"hot": BS}
    for p in range(10, 16):  # each new block needs room in hot: LRU would demote A first
        store(cache, p)
    assert cache.stats()["demotions"] >= 5
    assert where(cache, a) == {"hot": BS}, "a pinned block was demoted out of the top tier"
    cache.release(m)
    for p in range(20, 23):
        store(cache, p)
    assert "hot" not in where(cache, a), "released, it is an ordinary block again"
    cache.close()


@pytest.mark.parametrize("setup", SETUPS)
def test_the_pinned_deepest_block_of_a_chain_stays_in_the_top_tier(setup, tmp_path):
    cache = ContextCache.from_config({"block_size": BS, "tiers": tiers(setup, tmp_path, hot_blocks=3)})
    chain = store(cache, 1, n=3)
    m = cache.lookup(chain)
    for p in range(10, 16):
        store(cache, p)
    with cache.lookup(chain) as again:
        assert again.n_blocks == 3
        assert again.usage.by_tier.get("hot", 0) >= BS  # the deepest, pinned block at least
    cache.release(m)
    cache.close()


@pytest.mark.parametrize("setup", ["hot+warm+disk"])
def test_a_pinned_block_in_a_middle_tier_is_not_demoted_further(setup, tmp_path):
    """Pins hold in every tier above the last, not just the top one."""
    cache = make(setup, tmp_path, promote=False)  # a hit in warm stays in warm
    a = store(cache, 1)
    for p in range(10, 12):  # fills hot: A goes down to warm
        store(cache, p)
    m = cache.lookup(a)
    assert m.usage.by_tier == {"warm": BS}
    for p in range(20, 30):  # warm overflows into disk many times over
        store(cache, p)
    assert where(cache, a) == {"warm": BS}, "a pinned block was demoted out of a middle tier"
    cache.release(m)
    for p in range(30, 36):
        store(cache, p)
    assert where(cache, a) == {"disk": BS}
    cache.close()


@pytest.mark.parametrize("setup", SETUPS)
def test_every_block_of_a_held_match_stays_in_its_tier(setup, tmp_path):
    """Not just the deepest: a held prefix is served from the top tier next time too (a Match
    used to pin only its deepest block, so its ancestors were demoted while it was held)."""
    cache = ContextCache.from_config({"block_size": BS, "tiers": tiers(setup, tmp_path, hot_blocks=4)})
    chain = store(cache, 1, n=3)
    m = cache.lookup(chain)
    for p in range(10, 16):
        store(cache, p)
    assert where(cache, chain) == {"hot": 3 * BS}
    cache.release(m)
    for p in range(20, 26):
        store(cache, p)
    assert where(cache, chain).get("hot", 0) == 0, "released, the whole chain can be demoted"
    cache.close()
