"""ctxcache_evictions{reason}: each reason the engine removes blocks for is counted as that reason."""

from __future__ import annotations

from ctxcache.observability.exporter import CacheCollector

from ..engine.tenancy_util import ask, cache_with, prompt_of, tier_of

BLOCK = 64  # bytes a hot memory tier charges for one test block (16 float32)


def _by_reason(cache):
    fam = next(f for f in CacheCollector(cache.stats).collect() if f.name == "ctxcache_evictions")
    return {s.labels["reason"]: s.value for s in fam.samples if s.name.endswith("_total")}


def test_quota_ttl_and_erasure_are_counted_apart_from_capacity(tmp_path, clock):
    tenants = {"a": {"quota": {"memory": 8 * BLOCK}}, "t": {"ttl": "10s"}, "e": {}}
    cache = cache_with([tier_of("memory", tmp_path, capacity=64 * BLOCK)], tenants, clock=clock)
    for i in range(4):  # 16 blocks into a quota of 8: a's own blocks go, the tier is not full
        ask(cache, "a", prompt_of(100 + i))
    ask(cache, "t", prompt_of(1))
    ask(cache, "e", prompt_of(2))
    clock.advance(11)
    assert cache.sweep() == 4
    assert cache.erase_tenant("e")["erased_blocks"] == 4
    assert _by_reason(cache) == {"capacity": 0, "quota": 8, "ttl": 4, "erasure": 4, "corrupt": 0}
    for i in range(20):  # now fill the tier: capacity evictions
        ask(cache, "t", prompt_of(200 + i))
    got = _by_reason(cache)
    assert got["capacity"] > 0 and got["quota"] == 8 and got["ttl"] == 4
    cache.close()
