"""A promotion out of a slow tier keeps its copy there (``promote_hit``): if the write into the top
tier is refused, the block is still served from that copy. It was marked lost (a miss, counted in
``lost``) while the copy stayed charged in the source as an orphan.

A delete from a slow tier queued behind a move of the same block out of that tier (an erasure
during a demotion) reserves no outflow: the block was counted as leaving twice."""

from __future__ import annotations

import pytest

from ctxcache import ContextCache
from ctxcache.engine import erasure

from .tenancy_util import BS
from .test_delete_errors import _accounted, store, toks
from .test_retry_rewrite import Held


def test_a_refused_promotion_write_leaves_the_block_served_from_its_source():
    upper, lower = Held(1 << 20), Held(1 << 20)
    cache = ContextCache([upper, lower], block_size=BS)
    pl, lock = cache._engine.placement, cache._engine.lock
    store(cache, 0)
    assert cache.flush(10)
    (k,) = list(upper.keys())
    with lock:
        assert pl.make_room(0, 1)  # k down to the lower tier
    assert cache.flush(10) and cache._engine.index.get(k).tier == 1
    upper.gate.clear()
    upper.fail = 1
    with cache.lookup(toks(0)) as m:  # a hit below: promoted, its write into the top tier held
        assert m.n_blocks == 1
    assert upper.entered.wait(10)
    upper.gate.set()  # the write is refused
    assert cache.flush(10)
    stats = cache.stats()
    assert stats["write_errors"] == 1
    assert stats["lost"] == 0  # before the fix: 1
    assert cache._engine.index.get(k).tier == 1 and cache.slots[1].holds(k) and k in lower.store
    assert not cache.slots[0].holds(k) and k not in upper.store
    with cache.lookup(toks(0)) as m:  # still served, from the copy below
        assert m.n_blocks == 1
    assert cache.flush(10)
    assert cache._engine.index.get(k).tier == 0 and k in upper.store  # promoted this time
    _accounted(upper)
    _accounted(lower)
    cache.close()


def _demotion_held(fail: bool) -> tuple[ContextCache, Held, Held, bytes]:
    """Two slow tiers; block 0's demotion from the upper one queued, its write below held (``fail``:
    to be refused)."""
    upper, lower = Held(1 << 20), Held(1 << 20)
    cache = ContextCache([upper, lower], block_size=BS)
    store(cache, 0)
    assert cache.flush(10)
    (k,) = list(upper.keys())
    lower.gate.clear()
    lower.fail = int(fail)
    with cache._engine.lock:
        assert cache._engine.placement.make_room(0, 1)
    assert lower.entered.wait(10)
    return cache, upper, lower, k


@pytest.mark.parametrize("fail", [False, True])
def test_a_delete_queued_behind_a_demotion_from_the_same_tier_does_not_count_the_block_twice(fail):
    """A slow -> slow demotion of k is queued (its write below held), then an erasure's delete of k
    from the source: the demotion's outflow already counts k leaving. ``fail``: the write is refused."""
    cache, upper, lower, k = _demotion_held(fail)
    slot, lock = cache.slots[0], cache._engine.lock
    with lock:
        assert slot.used() == 0
        erasure._drop_stored(cache._engine, None, {0: [k]})
        assert slot.used() == 0  # before the fix: minus the block (counted leaving twice)
    lower.gate.set()
    assert cache.flush(10)
    assert k not in upper.store and slot.used() == upper.used_bytes == 0
    assert (slot.inflow, slot.outflow) == (0, 0) and cache.stats()["write_errors"] == int(fail)
    _accounted(upper)
    _accounted(lower)
    cache.close()


@pytest.mark.parametrize("fail", [False, True])
def test_a_block_erased_during_a_refused_slow_demotion_leaves_its_source_too(fail):
    """A TTL expiry or erase of k (``_erase_key``, as the sweep calls it) while its slow -> slow
    demotion is queued: k leaves the destination and, should the write be refused, the source."""
    cache, upper, lower, k = _demotion_held(fail)
    slot, lock = cache.slots[0], cache._engine.lock
    with lock:
        assert erasure._erase_key(cache._engine, k)
    lower.gate.set()
    assert cache.flush(10)
    assert k not in upper.store and k not in lower.store  # before the fix: an orphan above (fail)
    assert not slot.holds(k) and not slot.by_tenant and slot.used() == upper.used_bytes == 0
    assert (slot.inflow, slot.outflow) == (0, 0) and cache.stats()["write_errors"] == int(fail)
    _accounted(upper)
    _accounted(lower)
    cache.close()
