"""Quotas on every tier, fairness between tenants, priority classes, the pinned-bytes cap."""

from __future__ import annotations

import pytest

from ctxcache.engine.tenancy import PinnedQuotaError

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of

BLOCK = 64  # bytes a hot memory tier charges for one test block (16 float32)


def hits(cache, tenant, prompts):
    return sum(ask(cache, tenant, p) for p in prompts)


@pytest.mark.parametrize("mode", ["quota", "share"])
def test_a_flooding_tenant_evicts_its_own_blocks_first(tmp_path, mode):
    """b's prompts survive a's flood: by a's quota, or by its weighted share without quotas."""
    tenants = {"a": {}, "b": {}}
    if mode == "quota":
        tenants["a"] = {"quota": {"memory": 8 * BLOCK}}
    cache = cache_with([tier_of("memory", tmp_path, capacity=24 * BLOCK)], tenants)
    assert (
        cache.slots[0].tier.size_of(  # the unit this test counts in
            [__import__("numpy").zeros(16, "float32")]
        )
        == BLOCK
    )
    mine = [prompt_of(i) for i in (1, 2)]
    hits(cache, "b", mine)
    for i in range(100, 140):
        ask(cache, "a", prompt_of(i))
    limit = 8 * BLOCK if mode == "quota" else 16 * BLOCK  # quota, or capacity minus b's share
    assert cache.slots[0].tenant_used("a") <= limit
    assert hits(cache, "b", mine) == 2 * 4 * BS  # every block of b still cached
    assert cache.tenant_usage("a")["tiers"]["memory"]["quota"] == (8 * BLOCK if mode == "quota" else None)


def test_without_tenancy_the_same_flood_pushes_the_other_tenant_out(tmp_path):
    """The contrast that makes the test above able to fail: plain LRU, no tenants."""
    from ctxcache import ContextCache

    cache = ContextCache([tier_of("memory", tmp_path, capacity=24 * BLOCK)], block_size=BS)
    mine = [prompt_of(i) for i in (1, 2)]
    hits(cache, "b", mine)
    for i in range(100, 140):
        ask(cache, "a", prompt_of(i))
    assert hits(cache, "b", mine) == 0


@pytest.mark.parametrize("kind", ["disk", "redis"])
def test_quotas_hold_on_slow_tiers(kind, tmp_path, request):
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    ram = tier_of("memory", tmp_path, capacity=8 * BLOCK)
    slow = tier_of(kind, tmp_path, url, capacity=1 << 20)
    cache = cache_with([ram, slow], {"a": {"quota": {kind: 0}}, "b": {"quota": {kind: 6 * 400}}})
    for i in range(20):
        ask(cache, "a", prompt_of(i))
        ask(cache, "b", prompt_of(i))
    cache.flush()
    assert cache.slots[1].tenant_used("a") == 0  # quota 0: never written there
    assert 0 < cache.slots[1].tenant_used("b") <= 6 * 400
    assert slow.used_bytes == cache.slots[1].tenant_used("b")  # the tier agrees with the accounting
    cache.close()


def test_best_effort_blocks_leave_before_slo_blocks(tmp_path):
    cache = cache_with(  # slo's weight makes its 8 blocks its share: nobody is over its share
        [tier_of("memory", tmp_path, capacity=16 * BLOCK, high=1.0, low=1.0)],
        {"slo": {"priority": 1, "weight": 2}, "be": {"priority": 2}, "new": {"priority": 1}},
    )
    slo, be = [prompt_of(1), prompt_of(2)], [prompt_of(3), prompt_of(4)]
    hits(cache, "slo", slo)  # stored first: plain LRU would evict these first
    hits(cache, "be", be)
    ask(cache, "new", prompt_of(5))  # needs 4 blocks of room: class 2 gives them
    assert hits(cache, "slo", slo) == 2 * 4 * BS
    assert cache.slots[0].tenant_used("be") == 4 * BLOCK


def test_class_0_blocks_stay_while_their_ttl_lasts_and_are_capped(tmp_path, clock):
    cache = cache_with(
        [tier_of("memory", tmp_path, capacity=16 * BLOCK)],
        {"sys": {"priority": 0, "ttl": "60s"}, "be": {}},
        clock=clock,
        max_pinned=8 * BLOCK,
    )
    pinned = [prompt_of(1), prompt_of(2)]
    hits(cache, "sys", pinned)
    for i in range(10, 30):
        ask(cache, "be", prompt_of(i))
    assert hits(cache, "sys", pinned) == 2 * 4 * BS
    with pytest.raises(PinnedQuotaError, match="pinned"):
        ask(cache, "sys", prompt_of(3))  # 8 blocks pinned already: over the cap
    assert hits(cache, "sys", pinned) == 2 * 4 * BS  # nothing lost by the refusal
    clock.advance(61)  # expired: a miss, evictable like any block, and reclaimed by the sweeper
    assert cache.lookup(cache.prompt(pinned[0], "sys")).hit_tokens == 0
    assert cache.sweep() == 8 and cache.slots[0].tenant_used("sys") == 0
    assert ask(cache, "sys", prompt_of(3)) == 0  # room under the cap again


def test_quota_of_zero_serves_uncached(tmp_path):
    cache = cache_with([tier_of("memory", tmp_path)], {"z": {"quota": {"memory": 0}}, "b": {}})
    p = prompt_of(1)
    assert ask(cache, "z", p) == 0
    assert ask(cache, "z", p) == 0
    assert cache.stats()["rejected"] == 8 and cache.slots[0].tenant_used("z") == 0
    assert ask(cache, "b", p) == 0 and ask(cache, "b", p) == len(p)
