"""Operator pins (ContextCache.pin_prefix): a pinned prefix survives eviction pressure; pins are a
set, not a refcount, and a Match's release never drops one; erasure and invalidation win."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import DiskTier, MemoryTier

from .tenancy_util import BS, cache_with, payloads

TENANTS = {"a": {}, "b": {}}
SYSTEM = list(range(1, 1 + 3 * BS))  # a system prompt an operator pins: 3 blocks


def _store(cache: ContextCache, tokens: list[int], tenant: str = "a") -> None:
    prompt = cache.prompt(tokens, tenant)
    with cache.lookup(prompt) as m:
        cache.store(prompt, payloads(tokens, m.n_blocks), first_block=m.n_blocks)


def _hit(cache: ContextCache, tokens: list[int], tenant: str = "a") -> int:
    with cache.lookup(tokens, tenant) as m:
        for i, p in enumerate(m.payloads):
            assert float(np.asarray(p[0])[0]) == tokens[i * BS]
        return m.hit_tokens


def _tip(cache: ContextCache, tokens: list[int] = SYSTEM, tenant: str = "a") -> bytes:
    return cache.prompt(tokens, tenant).keys()[-1]


def _ram() -> MemoryTier:
    """A RAM tier of 8 blocks: 30 other blocks stored after SYSTEM push it out."""
    return MemoryTier(8 * MemoryTier(1 << 20).size_of(payloads(SYSTEM)[0]))


def _small(tiers: list[Any] | None = None) -> ContextCache:
    return cache_with(tiers or [_ram()], TENANTS)


def _pressure(cache: ContextCache) -> None:
    for p in range(30):
        _store(cache, [10_000 + 100 * p + j for j in range(BS)])


def test_a_pinned_prefix_survives_eviction_pressure_and_an_unpinned_one_does_not():
    cache = _small()
    _store(cache, SYSTEM)
    assert cache.pin_prefix(_tip(cache)) == 3
    assert cache.pinned_prefixes() == [_tip(cache)]
    _pressure(cache)
    assert cache.evict_all() > 0
    assert _hit(cache, SYSTEM) == 3 * BS
    assert cache.unpin_prefix(_tip(cache)) == 3
    assert cache.pinned_prefixes() == []
    _pressure(cache)
    assert _hit(cache, SYSTEM) == 0
    cache.close()


def test_pins_are_a_set_pinning_twice_and_unpinning_once_unpins():
    cache = _small()
    _store(cache, SYSTEM)
    tip = _tip(cache)
    assert cache.pin_prefix(tip) == 3 and cache.pin_prefix(tip) == 3
    assert cache.unpin_prefix(tip) == 3
    assert cache.unpin_prefix(tip) == 0  # not pinned any more
    assert cache.pinned_prefixes() == [] and all(n.pins == 0 for n in cache.index)
    cache.evict_all()
    assert _hit(cache, SYSTEM) == 0
    cache.close()


def test_a_lookups_release_never_drops_an_operator_pin_nor_an_unpin_a_lookups():
    cache = _small()
    _store(cache, SYSTEM)
    tip = _tip(cache)
    cache.pin_prefix(tip)
    for _ in range(3):
        _hit(cache, SYSTEM)  # lookup, release
    cache.evict_all()
    assert _hit(cache, SYSTEM) == 3 * BS
    held = cache.lookup(SYSTEM, "a")
    cache.unpin_prefix(tip)
    cache.evict_all()
    assert len(cache.index) == 3  # the Match still holds them
    cache.release(held)
    cache.evict_all()
    assert len(cache.index) == 0
    cache.close()


def test_prefixes_sharing_blocks_keep_the_shared_ones_pinned_until_both_end():
    cache = _small()
    _store(cache, SYSTEM)
    short = cache.prompt(SYSTEM, "a").keys()[0]
    assert cache.pin_prefix(short) == 1 and cache.pin_prefix(_tip(cache)) == 3
    assert cache.unpin_prefix(_tip(cache)) == 3
    cache.evict_all()
    assert _hit(cache, SYSTEM) == BS  # the shorter prefix is still pinned
    cache.close()


def test_pinning_a_key_that_is_not_cached_pins_nothing():
    cache = _small()
    assert cache.pin_prefix(bytes(16)) == 0 and cache.pinned_prefixes() == []
    cache.close()


def test_a_pinned_block_is_not_demoted_under_pressure(tmp_path):
    cache = _small([_ram(), DiskTier(1 << 20, path=tmp_path / "d", fsync=False)])
    _store(cache, SYSTEM)
    cache.pin_prefix(_tip(cache))
    _pressure(cache)
    assert cache.flush(10)
    assert {n.tier for n in cache.index.chain(_tip(cache))} == {0}  # still in RAM
    cache.close()


def test_erasing_the_tenant_wins_over_a_pin():
    cache = _small()
    _store(cache, SYSTEM)
    _store(cache, SYSTEM, "b")
    cache.pin_prefix(_tip(cache))
    out = cache.erase_tenant("a")
    assert out["verified"] and out["in_use"] == 0 and out["erased_blocks"] == 3
    assert cache.pinned_prefixes() == []
    assert _hit(cache, SYSTEM) == 0 and _hit(cache, SYSTEM, "b") == 3 * BS
    cache.close()


def test_invalidating_a_block_on_a_pinned_prefix_wins_and_ends_the_pin():
    cache = _small()
    _store(cache, SYSTEM)
    cache.pin_prefix(_tip(cache))
    out = cache.invalidate(cache.prompt(SYSTEM, "a").keys()[1])
    assert out["verified"] and out["in_use"] == 0 and out["erased_blocks"] == 2
    assert cache.pinned_prefixes() == []
    cache.evict_all()  # the first block, pinned by that prefix too, is free again
    assert len(cache.index) == 0
    cache.close()


def test_a_flush_wins_over_a_pin():
    cache = _small()
    _store(cache, SYSTEM)
    cache.pin_prefix(_tip(cache))
    assert cache.clear()["verified"] and len(cache.index) == 0 and cache.pinned_prefixes() == []
    cache.close()


def test_pinned_ram_blocks_are_spilled_to_disk_at_close(tmp_path):
    tiers = lambda: [MemoryTier(1 << 20), DiskTier(1 << 20, path=tmp_path / "d", fsync=False, write="demote")]  # noqa: E731
    cache = cache_with(tiers(), TENANTS)
    _store(cache, SYSTEM)
    cache.pin_prefix(_tip(cache))
    cache.close()
    cache = cache_with(tiers(), TENANTS)
    assert _hit(cache, SYSTEM) == 3 * BS and cache.pinned_prefixes() == []  # found on disk; pins not kept
    cache.close()


def test_a_blocks_ttl_wins_over_a_pin(clock):
    cache = cache_with([_ram()], {"a": {"ttl": "10s"}}, clock=clock)
    _store(cache, SYSTEM)
    cache.pin_prefix(_tip(cache))
    clock.advance(11)
    assert cache.sweep() == 3 and len(cache.index) == 0 and cache.pinned_prefixes() == []
    cache.close()
