"""Counters people read (stats, per-tenant usage, the erasure audit log) count what happened:
misses, per-tenant lookups, rejected stores, swept blocks at a given time, erased blocks."""

from __future__ import annotations

import logging

import numpy as np

from ctxcache import ContextCache

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of


def block(i: int) -> list[np.ndarray]:
    return [np.full(4, i, np.float32)]


def test_misses_are_the_uncached_full_blocks_of_each_lookup():
    cache = ContextCache.from_config({"block_size": BS})
    toks = list(range(4 * BS + 2))  # 4 full blocks and a partial one
    with cache.lookup(toks[: 2 * BS]) as m:
        cache.store(toks[: 2 * BS], [block(0), block(1)], "default", first_block=m.n_blocks)
    with cache.lookup(toks) as m:
        assert m.n_blocks == 2
    s = cache.stats()
    assert (s["lookups"], s["hits"], s["misses"]) == (2, 2, 2 + 2)  # first: 2 missed; second: 2 hit, 2 missed


def test_a_store_whose_parent_is_not_cached_counts_only_its_own_blocks_rejected():
    cache = ContextCache.from_config({"block_size": BS})
    toks = list(range(4 * BS))
    cache.store(toks, [block(2), block(3)], "default", first_block=2)  # blocks 0 and 1 never stored
    assert cache.stats()["rejected"] == 2 and cache.stats()["blocks"] == 0


def test_per_tenant_lookups_count_each_lookup(tmp_path, clock):
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {}, "b": {}}, clock=clock)
    for _ in range(3):
        ask(cache, "a", prompt_of(1))
    ask(cache, "b", prompt_of(1))
    a = cache.tenant_usage("a")
    assert a["lookups"] == 3 and a["lookup_tokens"] == 3 * len(prompt_of(1)) and a["hit_tokens"] == 2 * 16
    assert cache.tenant_usage("b")["lookups"] == 1


def test_sweep_at_a_given_time(tmp_path, clock):
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {"ttl": "10s"}}, clock=clock)
    ask(cache, "a", prompt_of(1))
    assert cache.sweep(now=clock() + 5) == 0
    assert cache.sweep(now=clock() + 11) == 4  # expired then, though the clock has not moved


def test_the_erasure_audit_record_gives_the_counts(tmp_path, clock, caplog):
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {}}, clock=clock)
    ask(cache, "a", prompt_of(1))
    with caplog.at_level(logging.INFO, logger="ctxcache.audit"):
        out = cache.erase_tenant("a")
    assert out["erased_blocks"] == 4
    msgs = [r.getMessage() for r in caplog.records if r.name == "ctxcache.audit"]
    assert any("erase tenant=a blocks=4 found_in_storage=0 in_use=0 verified=True" in m for m in msgs)
