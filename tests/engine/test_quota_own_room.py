"""A tenant at its quota still caches its newest prompt: it makes room among its own blocks
(``Placement.make_room(only=tenant)``), instead of having every new store refused."""

from __future__ import annotations

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of

BLOCK = 64  # bytes of one test block: 16 float32


def test_a_tenant_at_its_quota_evicts_its_own_oldest_blocks_for_new_ones(tmp_path):
    cache = cache_with([tier_of("memory", tmp_path, capacity=24 * BLOCK)], {"a": {"quota": {"memory": 8 * BLOCK}}})
    for i in range(10):
        ask(cache, "a", prompt_of(i))  # 4 blocks each: the quota holds two prompts
    assert cache.slots[0].tenant_used("a") <= 8 * BLOCK
    assert ask(cache, "a", prompt_of(9)) == 4 * BS  # the newest prompt was stored, not refused
    assert ask(cache, "a", prompt_of(0)) == 0
