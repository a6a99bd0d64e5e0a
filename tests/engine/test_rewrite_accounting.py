"""A write of a key its slow tier already holds (a rewrite) is counted once, while queued and after.

The engine queues one where a slow tier holds a block the index does not place there:
- a store into a slow top tier of a block whose eviction's delete was refused (kept, charged
  again, out of the index), or of a block an earlier run left (an orphan, found at start);
- a promotion into a slow top tier that still holds the block because the delete of its demotion
  was refused (the block lives in the tier below now).
The tier charges the old blob until the new one lands; a write reserving the new bytes as inflow
made ``Slot.used`` count the block twice meanwhile, and a store made then evicted (or demoted) a
block too many. Paths that reach a held key but must not write it are pinned at the end: a demotion
onto a clean copy, and a store after a lookup that discovered the orphans."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ctxcache import ContextCache
from ctxcache.engine.placement import Placement
from ctxcache.tiers import DiskTier, MemoryTier
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import BS
from .test_delete_errors import Refuse, _accounted, store, toks
from .test_write_mover_race import HeldAfterWrite, _blob_size


def _evict_refused(cache: ContextCache, refuse: Refuse) -> Hashable:
    """Evict (or demote) the top tier's oldest block; its delete is refused: the block stays there."""
    with cache._engine.lock:
        assert cache._engine.placement.make_room(0, 1)
    assert cache.flush(10)
    refuse.on = False
    (key,) = set(refuse.refused)
    return key


def _queued(tier: HeldAfterWrite) -> None:
    assert tier.entered.wait(10)  # the mover holds the rewrite before it is sent
    tier.entered.clear()


def _release(cache: ContextCache, tier: HeldAfterWrite) -> None:
    tier.before.set()
    assert cache.flush(10)
    slot = cache.slots[0]
    assert (slot.inflow, slot.outflow) == (0, 0) and slot.used() == tier.used_bytes
    _accounted(tier)


def test_a_store_of_a_block_a_refused_eviction_left_is_counted_once():
    blob, refuse = _blob_size(), Refuse()
    tier = HeldAfterWrite(4 * blob, on_call=refuse, high=1.0, low=1.0)
    cache = ContextCache([tier], block_size=BS)
    for i in range(3):
        store(cache, i)
        assert cache.flush(10)
    key = _evict_refused(cache, refuse)  # block 0: out of the index, still stored and charged
    slot, pl = cache.slots[0], cache._engine.placement
    assert key not in cache._engine.index and slot.holds(key) and slot.used() == 3 * blob
    evictions = cache.stats()["evictions"]
    tier.before.clear()
    store(cache, 0)  # block 0 again: the index lacks it, the tier holds it: a rewrite is queued
    _queued(tier)
    with cache._engine.lock:
        assert key in pl.mover.pending and tier.used_bytes == 3 * blob
        assert slot.used() == 3 * blob  # was 4: the held block and its rewrite
    store(cache, 3)  # fits in the block left free: nothing leaves
    _release(cache, tier)
    s = cache.stats()
    assert (s["evictions"], s["delete_errors"], s["write_errors"]) == (evictions, 1, 0)
    assert len(tier) == 4 and slot.used() == 4 * blob and slot.tenant_used("default") == 4 * blob
    with cache.lookup(toks(0)) as m:
        assert m.n_blocks == 1 and float(np.asarray(m.payloads[0][0])[0]) == 0
    cache.close()


def test_a_store_of_an_orphan_from_an_earlier_run_is_counted_once():
    blob = _blob_size()
    tier = HeldAfterWrite(4 * blob, high=1.0, low=1.0)
    first = ContextCache([tier], block_size=BS)
    for i in range(3):
        store(first, i)
    first.close()
    cache = ContextCache([tier], block_size=BS)  # a restart: three orphans, charged at start
    slot = cache.slots[0]
    assert len(cache._engine.index) == 0 and slot.used() == 3 * blob
    tier.before.clear()
    store(cache, 1)  # without a lookup: the index lacks it, the tier holds it
    _queued(tier)
    with cache._engine.lock:
        assert (tier.used_bytes, slot.used()) == (3 * blob, 3 * blob)  # was 4 blocks
    store(cache, 3)
    _release(cache, tier)
    assert cache.stats()["evictions"] == 0 and len(tier) == 4 and slot.used() == 4 * blob
    cache.close()


def test_a_promotion_into_a_slow_tier_that_kept_the_block_is_counted_once():
    blob, refuse = _blob_size(), Refuse()
    upper = HeldAfterWrite(4 * blob, on_call=refuse, high=1.0, low=1.0)
    lower = FakeSlowTier(1 << 20)
    cache = ContextCache([upper, lower], block_size=BS)
    for i in range(3):
        store(cache, i)
        assert cache.flush(10)
    key = _evict_refused(cache, refuse)  # block 0 demoted; its delete from the upper tier refused
    slot, node = cache.slots[0], cache._engine.index.get(key)
    assert node is not None and node.tier == 1 and slot.holds(key) and slot.used() == 3 * blob
    demotions = cache.stats()["demotions"]
    upper.before.clear()
    with cache.lookup(toks(0)) as m:  # a hit in the lower tier: promoted into the upper one
        assert m.n_blocks == 1 and m.usage.by_tier == {lower.name: BS}
    _queued(upper)
    with cache._engine.lock:
        assert key in cache._engine.placement.mover.pending and node.tier == 0
        assert (upper.used_bytes, slot.used()) == (3 * blob, 3 * blob)  # was 4
    store(cache, 3)  # fits: nothing is demoted for it
    _release(cache, upper)
    assert cache.stats()["demotions"] == demotions and len(upper) == 4 and slot.used() == 4 * blob
    with cache.lookup(toks(0)) as m:
        assert m.usage.by_tier == {upper.name: BS} and float(np.asarray(m.payloads[0][0])[0]) == 0
    cache.close()


def test_a_rewrite_of_a_different_size_is_counted_at_its_own_size():
    """A rewrite whose blob is smaller than the held one (another codec, or compression): while
    queued the slot counts the new bytes, not the old plus the new; once landed, the new only."""
    blob = _blob_size()
    tier = HeldAfterWrite(4 * blob, high=1.0, low=1.0)
    cache = ContextCache([tier], block_size=BS)
    store(cache, 0)
    assert cache.flush(10)
    key = next(iter(tier.keys()))
    big = 2 * blob
    with cache._engine.lock:  # as a block written by an earlier run with a larger encoding
        tier._charge(key, big)
        cache._engine.index.remove(key)
    slot = cache.slots[0]
    assert slot.used() == big
    tier.before.clear()
    store(cache, 0)
    _queued(tier)
    with cache._engine.lock:
        assert tier.used_bytes == big and slot.used() == blob  # the logical state: the new blob
    _release(cache, tier)
    assert tier.used_bytes == slot.used() == blob
    cache.close()


# --- held keys that must not be written ----------------------------------------------------------
def _writes(tier: FakeSlowTier) -> int:
    return tier.calls.count("put_blobs")


def test_a_block_promoted_out_of_a_slow_tier_is_demoted_onto_its_copy_without_a_write():
    ram, slow = MemoryTier(1 << 20), FakeSlowTier(1 << 20)
    cache = ContextCache([ram, slow], block_size=BS)
    store(cache, 0)
    pl: Placement = cache._engine.placement
    with cache._engine.lock:
        assert pl.make_room(0, 1)  # down to the slow tier: one write
    assert cache.flush(10) and _writes(slow) == 1
    with cache.lookup(toks(0)) as m:  # promoted to RAM; the slow tier keeps its copy
        assert m.n_blocks == 1
    assert cache.flush(10)
    with cache._engine.lock:
        assert pl.make_room(0, 1)  # down again: onto the copy
    assert cache.flush(10) and _writes(slow) == 1
    assert cache.slots[1].used() == slow.used_bytes == len(next(iter(slow.store.values())))
    cache.close()


def test_a_lookup_before_the_store_indexes_the_orphans_and_nothing_is_rewritten():
    tier = FakeSlowTier(1 << 20)
    first = ContextCache([tier], block_size=BS)
    for i in range(2):
        store(first, i)
    first.close()
    cache = ContextCache([tier], block_size=BS)
    before = _writes(tier)
    for i in range(2):
        with cache.lookup(toks(i)) as m:  # discovered: indexed where they lie
            assert m.n_blocks == 1
            cache.store(toks(i), [], first_block=m.n_blocks)
    assert cache.flush(10) and _writes(tier) == before
    assert cache.slots[0].used() == tier.used_bytes
    cache.close()


def test_a_rewrite_after_a_restart_with_another_codec_is_charged_to_its_tenant_at_its_new_size(tmp_path):
    """A disk of raw blocks, restarted as int8: a store without a lookup rewrites its orphans (larger
    here: int8 adds scales to these tiny arrays). The tenant was charged the raw size after that."""
    first = ContextCache([DiskTier(1 << 20, path=tmp_path / "d", fsync=False)], block_size=BS)
    for i in range(2):
        store(first, i)
    first.close()
    disk = DiskTier(1 << 20, path=tmp_path / "d", fsync=False, codec="int8")
    cache = ContextCache([disk], block_size=BS)
    slot, old = cache.slots[0], disk.used_bytes
    assert slot.tenant_used("default") == old  # the headers name the tenant
    for i in range(2):
        store(cache, i)
    assert cache.flush(10)
    assert disk.used_bytes != old and slot.used() == disk.used_bytes
    assert slot.tenant_used("default") == disk.used_bytes  # was the raw blocks' size
    assert cache.stats()["write_errors"] == 0
    cache.close()
