"""Erasure paths the broader tests do not reach: a flush's counters and audit record, and blocks an
earlier run left in a persistent tier (charged to their tenant at start, never indexed)."""

from __future__ import annotations

import logging

from ctxcache.tiers import DiskTier, RedisTier

from .tenancy_util import ask, cache_with, prompt_of, tier_of


def _audit(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ctxcache.audit"]


def test_a_flush_counts_what_it_erased_and_writes_its_audit_record(tmp_path, caplog):
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {}, "b": {}})
    ask(cache, "a", prompt_of(1))
    ask(cache, "b", prompt_of(2, n_blocks=2))
    with caplog.at_level(logging.INFO, logger="ctxcache.audit"):
        out = cache.clear()
    assert out == {"erased_blocks": 6, "found_in_storage": 0, "in_use": 0, "verified": True}
    s = cache.stats()
    assert s["erased"] == 6 and s["evictions_by_reason"]["erasure"] == 6
    assert "flush blocks=6 found_in_storage=0 in_use=0 verified=True" in _audit(caplog)
    cache.close()


def _left_on_disk(tmp_path, tenants):
    """A cache over a disk directory an earlier run filled with tenant a's blocks (spilled at close)."""
    path = tmp_path / "shared"

    def make(tn):
        return cache_with([tier_of("memory", tmp_path), DiskTier(1 << 20, path=path, fsync=False)], tn)

    writer = make({"a": {}, "b": {}})
    ask(writer, "a", prompt_of(1))
    ask(writer, "b", prompt_of(2))
    writer.close()
    return make(tenants)


def test_a_flush_removes_blocks_an_earlier_run_left_and_their_charges(tmp_path):
    cache = _left_on_disk(tmp_path, {"a": {}, "b": {}})
    disk = cache.slots[1]
    assert disk.tenant_used("a") > 0 and disk.tenant_used("b") > 0 and len(cache.index) == 0
    out = cache.clear()
    assert out["verified"] and out["erased_blocks"] == 8
    assert disk.by_tenant == {} and disk.used() == 0 and not disk.owners
    assert not list((disk.tier.root / "blocks").rglob("*.blk"))
    assert ask(cache, "a", prompt_of(1)) == 0  # nothing left to discover either
    cache.close()


def test_erasing_a_tenant_removes_only_its_blocks_an_earlier_run_left(tmp_path):
    cache = _left_on_disk(tmp_path, {"a": {}, "b": {}})
    disk = cache.slots[1]
    b_bytes = disk.tenant_used("b")
    out = cache.erase_tenant("a")
    assert out["verified"] and out["erased_blocks"] == 4 and out["in_use"] == 0
    assert disk.tenant_used("a") == 0 and disk.tenant_used("b") == b_bytes
    assert cache.stats()["erased"] == 4
    assert ask(cache, "a", prompt_of(1)) == 0 and ask(cache, "b", prompt_of(2)) == 16
    cache.close()


def test_blocks_found_in_shared_storage_are_counted_as_erased(tmp_path, redis_url):
    """Blocks another process wrote to a shared Redis prefix: found by their headers, deleted,
    and counted in the erasure counters like the blocks this process indexed."""

    def make():
        tier = RedisTier(1 << 20, url=redis_url, prefix=f"erase{id(tmp_path)}:", timeout=0.5)
        assert tier.wait_ready()
        return cache_with([tier], {"a": {}, "b": {}})

    writer = make()
    ask(writer, "a", prompt_of(1))
    ask(writer, "b", prompt_of(2))
    writer.close()
    fresh = make()
    out = fresh.erase_tenant("a")
    assert out["verified"] and out["found_in_storage"] == 4 and out["erased_blocks"] == 4
    assert fresh.stats()["erased"] == 4
    out = fresh.clear()
    assert out["verified"] and out["found_in_storage"] == 4
    assert fresh.stats()["erased"] == 8 and fresh.stats()["evictions_by_reason"]["erasure"] == 8
    fresh.close()
