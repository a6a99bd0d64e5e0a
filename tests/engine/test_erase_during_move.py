"""A demotion between slow tiers whose write fails while an erasure's delete of the block from the
source is queued behind it: the block stays in the source only until that delete lands, so the
source's slot must not charge it again (it charged a block storage no longer held, until evicted).

A victim taken from ``Slot.retry`` whose move fails at once (no room below, still needed) stays in
the tier: its retry ends there, so a later refused delete of it is a first refusal (a retry again),
not a retry refused again."""

from __future__ import annotations

from ctxcache import ContextCache
from ctxcache.engine import erasure

from .tenancy_util import BS
from .test_delete_errors import _accounted, store
from .test_retry_rewrite import Held


def test_a_failed_demotion_does_not_charge_a_block_an_erasure_deletes_from_the_source():
    upper, lower = Held(1 << 20), Held(1 << 20)
    cache = ContextCache([upper, lower], block_size=BS)
    slot, pl = cache.slots[0], cache._engine.placement
    store(cache, 0)
    assert cache.flush(10)
    (k,) = list(upper.keys())
    lower.gate.clear()
    lower.fail = 1
    with cache._engine.lock:
        assert pl.make_room(0, 1)  # k goes down: read from the upper tier, its write below held
    assert lower.entered.wait(10)
    with cache._engine.lock:  # the erasure's search found k in the upper tier's storage
        erasure._drop_stored(cache._engine, None, {0: [k]})
    lower.gate.set()  # the write is refused: k stays above until the erasure's delete lands
    assert cache.flush(10)
    assert k not in upper.store and not lower.store
    assert cache.stats()["write_errors"] == 1
    assert not slot.holds(k) and not slot.by_tenant  # before the fix: held and charged, not stored
    assert slot.used() == upper.used_bytes == 0 and (slot.inflow, slot.outflow) == (0, 0)
    _accounted(upper)
    _accounted(lower)
    cache.close()
