"""Blocks a lookup discovers in shared storage (another process wrote them) are charged to the
tenant like any block placed in that tier: within its quota there, and within the tier's capacity."""

from __future__ import annotations

from ctxcache.tiers import RedisTier

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of

BLOB = 256  # bytes of one test block in Redis (raw codec, 16 float32 and a header)


def _shared(tmp_path, redis_url, tenants, capacity=1 << 20):
    tier = RedisTier(capacity, url=redis_url, prefix=f"disc{id(tmp_path)}:", timeout=0.5, bloom=False)
    assert tier.wait_ready()
    return cache_with([tier_of("memory", tmp_path), tier], tenants)


def _write_down(cache):
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())
    cache.flush()


def _writer(tmp_path, redis_url, prompts):
    """A cache that stored ``prompts`` for tenant b and wrote them down to the shared Redis."""
    writer = _shared(tmp_path, redis_url, {"b": {}})
    for i in range(prompts):
        ask(writer, "b", prompt_of(i))
    _write_down(writer)
    return writer


def test_discovered_blocks_stay_within_the_tenants_quota(tmp_path, redis_url):
    writer = _writer(tmp_path, redis_url, 3)
    assert writer.slots[1].tier.nbytes(writer.prompt(prompt_of(0), "b").keys()[0]) == BLOB
    writer.close()
    reader = _shared(tmp_path, redis_url, {"b": {"quota": {"redis": 6 * BLOB}}})
    red = reader.slots[1]
    hit = sum(ask(reader, "b", prompt_of(i)) for i in range(3))
    assert hit > 0 and reader.stats()["discovered"] >= hit // BS
    assert red.tenant_used("b") <= 6 * BLOB
    reader.flush()  # the deletes of the blocks that made room
    assert red.tier.used_bytes == red.tenant_used("b")  # the tier charges what the slot does
    reader.close()


def test_a_quota_of_zero_adopts_nothing(tmp_path, redis_url):
    writer = _writer(tmp_path, redis_url, 1)
    writer.close()
    reader = _shared(tmp_path, redis_url, {"b": {"quota": {"redis": 0}}})
    assert ask(reader, "b", prompt_of(0)) == 0  # the tenant may not hold anything in Redis
    assert reader.slots[1].tenant_used("b") == 0 and reader.stats()["discovered"] == 0
    reader.close()


def test_discovered_blocks_stay_within_the_tiers_capacity(tmp_path, redis_url):
    writer = _writer(tmp_path, redis_url, 3)
    writer.close()
    reader = _shared(tmp_path, redis_url, {"b": {}}, capacity=6 * BLOB)
    for i in range(3):
        with reader.lookup(reader.prompt(prompt_of(i), "b")) as m:
            assert m.hit_tokens == 4 * BS
        assert reader.slots[1].used() <= 6 * BLOB  # before any store drains the tier
    reader.close()
