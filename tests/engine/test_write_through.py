"""Write-through (``write = "through"``): a store queues each new block to the slow tiers that take
copies, off the request path; RAM then leaves them without a second write; erasure removes every
copy; the write buffer and per-tenant quotas bound the copies, and a refused copy is counted while
the block still serves from RAM."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence

import numpy as np
import pytest

from ctxcache import ContextCache
from ctxcache.errors import ConfigError
from ctxcache.tiers import DiskTier, MemoryTier
from ctxcache.tiers.fake import FakeSlowTier

from .gates import Gate
from .tenancy_util import BS, ask, cache_with, payloads, prompt_of, tier_of


class CountingDisk(DiskTier):
    """Counts the blobs the mover writes (``puts``); refuses the first ``refuse`` of them."""

    def __init__(self, *a: object, refuse: int = 0, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.puts, self.refuse = 0, refuse

    def put_blob(self, key: Hashable, blob: bytes) -> int:
        self.puts += 1
        if self.refuse:
            self.refuse -= 1
            raise OSError(28, "No space left on device")
        return super().put_blob(key, blob)


def files(disk: DiskTier) -> int:
    return sum(1 for _ in (disk.root / "blocks").rglob("*.blk"))


def ram_disk(tmp_path, ram: int = 1 << 20, **disk_kw: object) -> tuple[ContextCache, CountingDisk]:
    disk = CountingDisk(1 << 20, path=tmp_path / "disk", fsync=False, **disk_kw)
    return ContextCache([MemoryTier(ram), disk], block_size=BS), disk


def evict_ram(cache: ContextCache) -> None:
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())


def test_a_disk_under_ram_is_write_through_by_default_and_gets_every_store(tmp_path):
    cache, disk = ram_disk(tmp_path)
    assert [s.write for s in cache.slots] == ["demote", "through"]
    toks = prompt_of(1)
    assert ask(cache, "default", toks) == 0
    cache.flush()
    assert files(disk) == 4 and disk.puts == 4 and len(cache.slots[0].tier) == 4  # on disk and in RAM
    s = cache.stats()
    assert s["through_writes"] == 4 and s["through_dropped"] == 0 and s["tiers"]["disk"]["write"] == "through"
    assert cache.slots[1].used() == disk.used_bytes and cache.slots[1].tenant_used("default") == disk.used_bytes
    evict_ram(cache)  # RAM leaves them: the copies are there, nothing is written again
    cache.flush()
    assert disk.puts == 4 and len(cache.slots[0].tier) == 0 and cache.stats()["demotions"] == 4
    assert ask(cache, "default", toks) == 4 * BS  # served from disk
    cache.close()


def test_demote_keeps_the_old_behaviour(tmp_path):
    cache, disk = ram_disk(tmp_path, write="demote")
    ask(cache, "default", prompt_of(1))
    cache.flush()
    assert files(disk) == 0 and cache.stats()["through_writes"] == 0
    evict_ram(cache)
    cache.flush()
    assert files(disk) == 4 and disk.puts == 4
    cache.close()


def test_a_block_leaves_ram_while_its_copy_is_queued_and_serves_from_the_queue(tmp_path):
    gate = Gate()
    slow = FakeSlowTier(1 << 20, on_call=gate, write="through")
    cache = ContextCache([MemoryTier(1 << 20), slow], block_size=BS)
    toks = prompt_of(2)
    ask(cache, "default", toks)
    assert gate.entered.wait(10)  # the mover holds the copies, unwritten
    evict_ram(cache)  # not held back by the queued copies: they leave RAM, no second move queued
    assert len(cache.slots[0].tier) == 0 and cache.stats()["pending_moves"] == 4
    assert ask(cache, "default", toks) == 4 * BS  # from the queue's payloads
    gate.open.set()
    cache.flush()
    assert len(slow) == 4 and ask(cache, "default", toks) == 4 * BS
    assert cache.slots[1].used() == slow.used_bytes and not cache.slots[1].inflow
    cache.close()


def test_erasure_removes_the_ram_block_and_its_copies_landed_or_queued(tmp_path, redis_server):
    ram, disk = tier_of("memory", tmp_path), tier_of("disk", tmp_path)
    red = tier_of("redis", tmp_path, redis_server.url)
    cache = cache_with([ram, disk, red], {"a": {}, "b": {}})
    assert [s.write for s in cache.slots] == ["demote", "through", "through"]
    ask(cache, "a", prompt_of(1))
    ask(cache, "b", prompt_of(2))
    cache.flush()
    assert len(disk) == 8 and len(red) == 8
    ask(cache, "a", prompt_of(3))  # its copies still queued, or just landed, when the erasure runs
    out = cache.erase_tenant("a")
    assert out["verified"] and out["erased_blocks"] >= 8
    assert len(disk) == 4 and len(red) == 4 and len(ram) == 4  # b's blocks only
    assert all(s.tenant_used("a") == 0 for s in cache.slots)
    assert [s.used() for s in cache.slots[1:]] == [disk.used_bytes, red.used_bytes]
    assert ask(cache, "a", prompt_of(1)) == 0 and ask(cache, "b", prompt_of(2)) == 4 * BS
    cache.close()


def test_a_tenants_quota_bounds_its_copies_and_a_refused_copy_is_counted(tmp_path):
    probe, _ = ram_disk(tmp_path / "probe")
    ask(probe, "default", prompt_of(0, n_blocks=1))
    probe.flush()
    blob = probe.slots[1].tier.used_bytes  # one block's bytes on disk
    probe.close()
    ram, disk = tier_of("memory", tmp_path), tier_of("disk", tmp_path)
    cache = cache_with([ram, disk], {"a": {"quota": {"disk": 2 * blob}}})
    toks = prompt_of(1, n_blocks=6)
    ask(cache, "a", toks)  # copies 3..6 find a's quota full of queued copies: dropped, counted
    s = cache.stats()
    assert s["through_writes"] == 2 and s["through_dropped"] == 4 and s["stored_blocks"] == 6
    assert cache.slots[1].tenant_used("a") <= 2 * blob
    cache.flush()
    assert len(disk) == 2 and disk.used_bytes <= 2 * blob
    assert ask(cache, "a", toks) == 6 * BS  # every block still served from RAM
    cache.close()


def test_the_write_buffer_bounds_the_queue_and_the_store_never_waits(tmp_path):
    gate = Gate()
    slow = FakeSlowTier(1 << 20, on_call=gate, write="through")
    probe = FakeSlowTier(1 << 20)
    probe.token_bytes = 4 * BS  # as the engine sets it: headers carry a block's token bytes
    size = probe.size_of(payloads(prompt_of(0))[0])
    # write_lag=0: the buffer alone bounds the queue here (test_write_lag.py: stores that wait)
    cache = ContextCache([MemoryTier(1 << 20), slow], block_size=BS, write_buffer=3 * size, write_lag=0)
    ask(cache, "default", prompt_of(1))  # 3 copies fit the buffer, the 4th is dropped
    assert gate.entered.wait(10)
    done = threading.Event()
    threading.Thread(target=lambda: (ask(cache, "default", prompt_of(2)), done.set()), daemon=True).start()
    assert done.wait(5), "a store waited for a write-through copy"  # the mover is stuck at the gate
    s = cache.stats()
    assert s["through_writes"] == 3 and s["through_dropped"] == 5 and s["write_buffer_bytes"] <= 3 * size
    assert ask(cache, "default", prompt_of(2)) == 4 * BS  # served from RAM
    gate.open.set()
    cache.flush()
    assert len(slow) == 3
    cache.close()


def test_a_copy_refused_by_the_tier_is_counted_and_the_block_stays_in_ram(tmp_path):
    cache, disk = ram_disk(tmp_path, refuse=4)
    toks = prompt_of(1)
    ask(cache, "default", toks)
    cache.flush()
    s = cache.stats()
    assert s["write_errors"] == 4 and s["lost"] == 0 and files(disk) == 0
    assert not any(cache.slots[1].holds(k) for k in cache.slots[0].tier.keys())  # noqa: SIM118 (a Tier method)
    assert cache.slots[1].used() == 0 and cache.slots[1].tenant_used("default") == 0
    assert ask(cache, "default", toks) == 4 * BS
    evict_ram(cache)  # no copy there: demoted the usual way
    cache.flush()
    assert files(disk) == 4 and ask(cache, "default", toks) == 4 * BS
    cache.close()


class RefusingSlow(FakeSlowTier):
    """Healthy, but refuses every write (a Redis answering errors to SET)."""

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        return [False] * len(items)


def test_a_refused_deeper_copy_is_dropped_while_the_nearer_one_is_queued(tmp_path):
    """The deeper tier's copies are queued first (the nearer one is a key's latest move), so when
    the deeper write fails the nearer copy is still queued: only a move concerning that tier
    keeps the failed copy charged there."""
    disk = tier_of("disk", tmp_path)
    deep = RefusingSlow(1 << 20, write="through")
    cache = ContextCache([MemoryTier(1 << 20), disk, deep], block_size=BS)
    ask(cache, "default", prompt_of(1))
    cache.flush()
    assert len(disk) == 4 and cache.stats()["write_errors"] == 4
    assert cache.slots[2].used() == 0 and cache.slots[2].tenant_used("default") == 0
    assert not any(cache.slots[2].holds(k) for k in disk.keys())  # noqa: SIM118 (a Tier method)
    cache.close()


@pytest.mark.parametrize(
    ("kinds", "want"),
    [
        (["memory", "disk"], ["demote", "through"]),
        (["memory", "disk", "redis"], ["demote", "through", "through"]),
        (["memory", "redis", "disk"], ["demote", "through", "demote"]),
        (["memory", "memory", "disk"], ["demote", "demote", "through"]),
        (["memory", "disk", "disk"], ["demote", "through", "demote"]),
        (["disk", "redis"], ["demote", "through"]),
    ],
)
def test_the_defaults_by_place(kinds, want, tmp_path, redis_server):
    tiers = [tier_of(k, tmp_path, redis_server.url) for k in kinds]
    cache = ContextCache(tiers, block_size=BS)
    assert [s.write for s in cache.slots] == want
    cache.close()


def test_the_write_setting_from_a_dict_and_from_toml(tmp_path):
    disk = {"kind": "disk", "capacity": "1MiB", "path": str(tmp_path / "d"), "fsync": False}
    cfg = {"block_size": BS, "tiers": [{"kind": "memory", "capacity": "1MiB"}, {**disk, "write": "demote"}]}
    cache = ContextCache.from_config(cfg)
    assert [s.write for s in cache.slots] == ["demote", "demote"]
    cache.close()
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'block_size = {BS}\n[[tiers]]\nkind = "memory"\ncapacity = "1MiB"\n'
        f'[[tiers]]\nkind = "disk"\ncapacity = "1MiB"\npath = "{tmp_path / "t"}"\nwrite = "through"\n'
    )
    cache = ContextCache.from_config(toml)
    assert [s.write for s in cache.slots] == ["demote", "through"]
    cache.close()


@pytest.mark.parametrize("bad", ["always", "Through", 1, True])
def test_a_bad_write_value_is_a_config_error_naming_the_tier(bad, tmp_path):
    disk = {"kind": "disk", "capacity": "1MiB", "path": str(tmp_path / "d"), "write": bad}
    with pytest.raises(ConfigError, match=r'tiers\[1\] \(disk\): write must be "through" or "demote"'):
        ContextCache.from_config({"tiers": [{"kind": "memory", "capacity": "1MiB"}, disk]})
    assert not (tmp_path / "d").exists()  # refused before the tier opened


def test_write_through_into_a_ram_tier_is_refused():
    with pytest.raises(ConfigError, match="applies to disk and redis tiers"):
        ContextCache.from_config({"tiers": [{"kind": "memory", "capacity": "1MiB", "write": "through"}]})
    with pytest.raises(ConfigError, match="applies to disk and redis tiers"):
        MemoryTier(1 << 20, write="through")


def test_blocks_of_different_layouts_in_one_store_are_each_charged_their_own_size(tmp_path):
    """A store measures a copy's size once per payload layout: blocks that differ are not charged
    one another's size (the tier's bytes and the tenant's charge agree once they landed)."""
    cache, disk = ram_disk(tmp_path)
    toks = prompt_of(1, n_blocks=3)
    blocks = [[np.zeros(16, np.float32)], [np.zeros(64, np.float32)], [np.zeros(224, np.float16)]]
    cache.store(toks, blocks)
    cache.flush()
    sizes = sorted(disk.nbytes(k) for k in disk.keys())  # noqa: SIM118 (a Tier method)
    assert len(set(sizes)) == 3
    assert cache.slots[1].tenant_used("default") == disk.used_bytes == sum(sizes) == cache.slots[1].used()
    cache.close()
