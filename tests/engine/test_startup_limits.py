"""A restart that finds more blocks on disk than the limits configured now allow (a tenant's quota
lowered, a smaller tier) brings the tier within them at start, as a store would: the tier's policy
picks (oldest first), a lower tier takes what it has room for, the rest is evicted and counted
(quota evictions for a quota). Before, every block found was charged with no check, and a tenant
that only read held more than its quota for as long as the process ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxcache import ContextCache
from ctxcache.tiers import DiskTier, MemoryTier

from .tenancy_util import BS, ask, cache_with, prompt_of

BLOB = 256  # bytes of one test block on disk


def _disk(path: Path, capacity: int = 1 << 20, name: str = "disk") -> DiskTier:
    return DiskTier(capacity, path=path, fsync=False, name=name, high=1.0, low=1.0)


def _write(path: Path, asks: list[tuple[str, int]]) -> list[bytes]:
    """An earlier run: store one prompt (4 blocks) per (tenant, i), close (spilled to disk).
    Returns the keys on disk in the order a restart learns them (oldest first)."""
    writer = cache_with([MemoryTier(1 << 20), _disk(path)], {t: {} for t, _ in asks})
    for tenant, i in asks:
        ask(writer, tenant, prompt_of(i))
    writer.close()
    found = _disk(path)
    keys = list(found.keys())
    assert len(keys) == 4 * len(asks) and {found.nbytes(k) for k in keys} == {BLOB}
    found.close()
    return keys


def _owned(disk: DiskTier, keys: list[bytes], tenant: str) -> list[bytes]:
    return [k for k in keys if disk.tenant_of(k) == tenant.encode()]


def _files(path: Path) -> int:
    return sum(1 for _ in path.glob("blocks/*/*.blk"))


@pytest.mark.parametrize("kept", [4, 0])
def test_a_restart_evicts_a_tenants_oldest_blocks_down_to_its_lowered_quota(tmp_path, kept):
    path = tmp_path / "disk"
    keys = _write(path, [("b", 1), ("a", 2), ("b", 3)])
    disk = _disk(path)
    b_keys = _owned(disk, keys, "b")
    assert len(b_keys) == 8
    cache = cache_with([MemoryTier(1 << 20), disk], {"a": {}, "b": {"quota": {"disk": kept * BLOB}}})
    assert cache.flush(10)
    slot = cache.slots[1]
    assert slot.tenant_used("b") == kept * BLOB and slot.tenant_used("a") == 4 * BLOB
    assert disk.used_bytes == slot.used() == (kept + 4) * BLOB
    assert _files(path) == kept + 4  # the excess is gone from storage, not only uncharged
    assert set(_owned(disk, list(disk.keys()), "b")) == set(b_keys[8 - kept :])  # the newest stay
    s = cache.stats()
    assert s["quota_evictions"] == s["evictions"] == 8 - kept
    assert s["evictions_by_reason"]["quota"] == 8 - kept and s["evictions_by_reason"]["capacity"] == 0
    assert ask(cache, "a", prompt_of(2)) == 4 * BS  # the other tenant's blocks were left alone
    cache.close()


def test_a_restart_over_a_quota_writes_the_excess_down_when_a_lower_tier_has_room(tmp_path):
    path = tmp_path / "disk"
    keys = _write(path, [("b", 1), ("b", 2)])
    disk, lower = _disk(path), _disk(tmp_path / "lower", name="lower")
    b_keys = _owned(disk, keys, "b")
    cache = cache_with([MemoryTier(1 << 20), disk, lower], {"b": {"quota": {"disk": 4 * BLOB}}})
    assert cache.flush(10)
    assert cache.slots[1].tenant_used("b") == disk.used_bytes == 4 * BLOB
    assert cache.slots[2].tenant_used("b") == lower.used_bytes == 4 * BLOB
    assert set(lower.keys()) == set(b_keys[:4])  # the oldest went down, none was lost
    s = cache.stats()
    assert s["demotions"] == 4 and s["evictions"] == 0
    assert ask(cache, "b", prompt_of(1)) == 4 * BS  # still served, from the lower tier
    cache.close()


def test_a_restart_finding_more_than_the_tiers_capacity_evicts_down_to_it(tmp_path):
    path = tmp_path / "disk"
    keys = _write(path, [("default", 1), ("default", 2), ("default", 3)])
    disk = _disk(path, capacity=8 * BLOB)
    cache = ContextCache([MemoryTier(1 << 20), disk], block_size=BS)  # no tenants
    assert cache.flush(10)
    assert disk.used_bytes == cache.slots[1].used() == 8 * BLOB and _files(path) == 8
    assert set(disk.keys()) == set(keys[4:])
    s = cache.stats()
    assert s["evictions"] == 4 and s["evictions_by_reason"]["capacity"] == 4
    cache.close()
