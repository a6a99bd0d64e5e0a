"""Fairness stages the quota tests do not reach: a class-0 tenant over its share keeps its live
blocks, and class-0 blocks whose TTL ran out (not swept yet) are the ones that make room."""

from __future__ import annotations

import pytest

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of

BLOCK = 64  # bytes a hot memory tier charges for one test block (16 float32)


def _full_tier(tmp_path, tenants, clock=None):
    tier = tier_of("memory", tmp_path, capacity=16 * BLOCK, high=1.0, low=1.0)
    return cache_with([tier], tenants, clock=clock)


@pytest.fixture
def no_sweeper(monkeypatch):
    """Expired blocks stay until something needs their room (the sweeper would race the test)."""
    monkeypatch.setattr("ctxcache.engine.core.SWEEP_EVERY_S", 3600.0)


def test_a_class_0_tenant_over_its_share_keeps_its_live_blocks(tmp_path):
    cache = _full_tier(tmp_path, {"sys": {"priority": 0}, "be": {}})
    pinned = [prompt_of(i) for i in (1, 2, 3)]
    for p in pinned:
        ask(cache, "sys", p)  # 12 of 16 blocks: over its half share once "be" is present
    ask(cache, "be", prompt_of(10))  # the tier is full
    assert cache.slots[0].tenant_used("sys") == 12 * BLOCK
    ask(cache, "be", prompt_of(11))  # room comes from be's own blocks, never from live class-0 ones
    assert cache.slots[0].tenant_used("sys") == 12 * BLOCK
    assert cache.slots[0].tenant_used("be") == 4 * BLOCK
    assert sum(ask(cache, "sys", p) for p in pinned) == 3 * 4 * BS
    assert ask(cache, "be", prompt_of(11)) == 4 * BS and ask(cache, "be", prompt_of(10)) == 0


def test_expired_class_0_blocks_make_room_and_live_ones_stay(tmp_path, clock, no_sweeper):
    cache = _full_tier(tmp_path, {"sys": {"priority": 0, "ttl": "10s"}}, clock)
    old, new = [prompt_of(1), prompt_of(2)], [prompt_of(3), prompt_of(4)]
    for p in old:
        ask(cache, "sys", p)
    clock.advance(5)
    for p in new:
        ask(cache, "sys", p)  # full: 16 blocks, the first 8 expire at t=10, the others at t=15
    clock.advance(6)
    assert ask(cache, "sys", prompt_of(5)) == 0  # t=11: needs 4 blocks of room
    assert cache.stats()["rejected"] == 0 and cache.stats()["evictions"] == 4
    assert ask(cache, "sys", prompt_of(5)) == 4 * BS
    assert sum(ask(cache, "sys", p) for p in new) == 2 * 4 * BS  # live class-0 blocks never leave


def test_live_class_0_blocks_refuse_room_rather_than_leave(tmp_path, clock, no_sweeper):
    """The contrast to the test above: nothing expired, so the store is refused."""
    cache = _full_tier(tmp_path, {"sys": {"priority": 0, "ttl": "10s"}}, clock)
    held = [prompt_of(i) for i in (1, 2, 3, 4)]
    for p in held:
        ask(cache, "sys", p)
    clock.advance(5)
    ask(cache, "sys", prompt_of(5))
    assert cache.stats()["rejected"] == 4 and cache.stats()["evictions"] == 0
    assert sum(ask(cache, "sys", p) for p in held) == 4 * 4 * BS
