"""Placement paths no test reached before mutation testing: blocks discovered after a restart
(owner and tier recorded, served again), promotions that respect the tenant's quota and a write
buffer of exactly one block, the write buffer's bound on demotions out of RAM (and none on moves
between slow tiers, which hold no RAM), a failed write between slow tiers, and lost blocks
leaving the index."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import DiskTier
from ctxcache.tiers.fake import FakeSlowTier

from .gates import Gate
from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of

BLOCK = 64  # bytes a hot memory tier charges for one test block (16 float32)


def blocks(first: int, n: int) -> list[list[np.ndarray]]:
    return [[np.full(16, first + i, np.float32)] for i in range(n)]


def toks(i: int, n_blocks: int) -> list[int]:
    return [i * 1000 + j for j in range(n_blocks * BS)]


def values(m: Any) -> list[float]:
    return [float(np.asarray(p[0])[0]) for p in m.payloads]


def test_blocks_discovered_after_a_restart_keep_their_tenant_and_are_served_again(tmp_path, clock):
    def cache() -> ContextCache:
        ram = tier_of("memory", tmp_path, capacity=1 << 20)
        disk = DiskTier(1 << 20, path=tmp_path / "disk", fsync=False)
        return cache_with([ram, disk], {"a": {}, "b": {}}, clock=clock)

    writer = cache()
    ask(writer, "a", prompt_of(1))
    writer.close()  # spilled to disk
    fresh = cache()
    assert ask(fresh, "a", prompt_of(1)) == 4 * BS  # discovered on disk
    assert fresh.tenant_usage("a")["blocks"] == 4 and fresh.tenant_usage("b")["blocks"] == 0
    assert ask(fresh, "a", prompt_of(1)) == 4 * BS  # now indexed: a plain hit
    assert fresh.stats()["discovered"] == 4 and fresh.stats()["lost"] == 0
    assert fresh.erase_tenant("a")["erased_blocks"] == 4  # erasure finds them through their owner
    assert ask(fresh, "a", prompt_of(1)) == 0
    fresh.close()


def test_a_promotion_stays_within_the_tenants_quota_of_the_top_tier(tmp_path):
    ram = tier_of("memory", tmp_path, capacity=64 * BLOCK)
    disk = tier_of("disk", tmp_path)
    cache = cache_with([ram, disk], {"a": {"quota": {"memory": 4 * BLOCK}}})
    ask(cache, "a", prompt_of(1))
    ask(cache, "a", prompt_of(2))  # at its quota: prompt 1 goes down to disk
    cache.flush()
    assert ask(cache, "a", prompt_of(1)) == 4 * BS  # served from disk, promoted back
    assert cache.stats()["promotions"] > 0
    assert cache.slots[0].tenant_used("a") <= 4 * BLOCK  # by demoting its own blocks, not past it
    cache.close()


def test_a_write_buffer_of_exactly_one_block_still_promotes_it():
    top, below = FakeSlowTier(5 * 256, name="top"), FakeSlowTier(1 << 20, name="below")  # ~4 blocks on top
    top.token_bytes = 4 * BS  # as the engine sets it, so that size_of measures as it will
    one = top.size_of(blocks(0, 1)[0])  # what a promotion into the top tier holds
    cache = ContextCache([top, below], block_size=BS, write_buffer=one)
    for i in range(8):
        cache.store(toks(i, 1), blocks(10 * i, 1), "default", 0)
        assert cache.flush(10)
    assert cache.stats()["demotions"] > 0 and cache.stats()["promotions"] == 0
    with cache.lookup(toks(0, 1)) as m:  # demoted: read from below, copied up
        assert values(m) == [0.0]
    assert cache.stats()["promotions"] == 1
    assert cache.flush(10)
    with cache.lookup(toks(0, 1)) as m:  # the copy landed in the top tier and serves from there
        assert values(m) == [0.0] and m.usage.by_tier == {"top": BS}
    assert (cache.stats()["write_errors"], cache.stats()["lost"]) == (0, 0)
    cache.close()


def test_demotions_out_of_ram_are_skipped_while_the_write_buffer_is_full():
    gate = Gate()
    slow = FakeSlowTier(1 << 20, on_call=gate)
    slow.token_bytes = 4 * BS  # as the engine sets it, so that size_of measures as it will
    one = slow.size_of(blocks(0, 1)[0])  # what a demotion holds: the block encoded for the slow tier
    cache = ContextCache([tier_of("memory", None, capacity=4 * BLOCK), slow], block_size=BS, write_buffer=one)
    try:
        for i in range(4):
            cache.store(toks(i, 2), blocks(10 * i, 2), "default", 0)  # each store pushes older ones down
        s = cache.stats()
        assert s["demotions"] == 1 and s["write_buffer_bytes"] == one  # one queued write fills it
        assert s["demotions_skipped"] > 0 and s["evictions"] > 0  # never waited for: evicted instead
    finally:
        gate.open.set()
    assert cache.flush(10)
    cache.close()


def test_moves_between_slow_tiers_hold_no_ram_so_a_tiny_write_buffer_never_skips_them():
    top, below = FakeSlowTier(5 * 256), FakeSlowTier(1 << 20)
    cache = ContextCache([top, below], block_size=BS, write_buffer=1)
    for i in range(6):
        cache.store(toks(i, 1), blocks(10 * i, 1), "default", 0)
        assert cache.flush(10)
    s = cache.stats()
    assert s["demotions"] >= 2 and s["demotions_skipped"] == 0 and s["evictions"] == 0
    with cache.lookup(toks(0, 1)) as m:
        assert values(m) == [0.0]
    cache.close()


class RefusingSlowTier(FakeSlowTier):
    """A slow tier that is up but refuses every write (a full or read-only backend)."""

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        self._call("put_blobs", [k for k, _ in items])
        return [False] * len(items)


def test_a_block_whose_write_to_a_slower_tier_failed_is_still_served_from_where_it_was():
    top, below = FakeSlowTier(5 * 256), RefusingSlowTier(1 << 20)
    cache = ContextCache([top, below], block_size=BS)
    for i in range(6):
        cache.store(toks(i, 1), blocks(10 * i, 1), "default", 0)
        assert cache.flush(10)
    assert cache.stats()["write_errors"] > 0 and len(below) == 0
    for i in range(6):
        with cache.lookup(toks(i, 1)) as m:
            assert values(m) == [10.0 * i]
    assert cache.stats()["lost"] == 0
    cache.close()


class SharedSlowTier(FakeSlowTier):
    """Like a Redis tier without a Bloom filter: any key may be there (another process may have
    written it), so discovery always asks."""

    def might_contain_many(self, keys: Sequence[Hashable]) -> list[bool]:
        return [True] * len(keys)


def test_a_block_lost_to_a_transient_read_failure_is_found_again_and_served_from_then_on():
    slow = SharedSlowTier(1 << 20)
    cache = ContextCache([slow], block_size=BS)
    cache.store(toks(1, 3), blocks(0, 3), "default", 0)
    assert cache.flush(10)
    with cache.lookup(toks(1, 3)) as m:
        slow.lose.add(m.keys[1])  # the middle block cannot be read for a while
    with cache.lookup(toks(1, 3)) as m:
        assert m.n_blocks == 1
    assert cache.stats()["lost"] == 1 and cache.stats()["blocks"] == 3  # kept: its child holds it
    slow.lose.clear()  # readable again: discovery finds it in the tier
    for _ in range(2):
        with cache.lookup(toks(1, 3)) as m:
            assert values(m) == [0.0, 1.0, 2.0]
    assert cache.stats()["lost"] == 1
    # Found again, it is the tier's block once more: its node says so and its bytes are charged
    # (the lost block had been uncharged); a found-again block left marked lost was served but not
    # counted, so the tier's quota and usage missed it.
    e = cache._engine
    assert e.index.get(m.keys[1]).tier == 0 and e.slots[0].holds(m.keys[1])
    assert cache.stats()["tiers"][slow.name]["tenants"] == {"default": 3 * slow.nbytes(m.keys[0])}
    cache.close()


def test_lost_blocks_leave_the_index_once_unpinned():
    slow = FakeSlowTier(1 << 20)
    cache = ContextCache([slow], block_size=BS)
    cache.store(toks(1, 3), blocks(0, 3), "default", 0)
    cache.store(toks(2, 1), blocks(5, 1), "default", 0)
    assert cache.flush(10) and cache.stats()["blocks"] == 4
    with cache.lookup(toks(1, 3)) as m:
        slow.lose.update(m.keys[1:])  # blocks 1 and 2 become unreadable
    with cache.lookup(toks(1, 3)) as m:
        assert m.n_blocks == 1
    s = cache.stats()
    assert s["lost"] == 2 and s["blocks"] == 2  # the lost chain is gone; block 0 and prompt 2 stay
    cache.close()
