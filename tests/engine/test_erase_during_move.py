"""A demotion between slow tiers whose write fails while an erasure's delete of the block from the
source is queued behind it: the block stays in the source only until that delete lands, so the
source's slot must not charge it again (it charged a block storage no longer held, until evicted).

A victim taken from ``Slot.retry`` whose move fails at once (no room below, still needed) stays in
the tier: its retry ends there, so a later refused delete of it is a first refusal (a retry again),
not a retry refused again."""

from __future__ import annotations

import numpy as np

from ctxcache import ContextCache
from ctxcache.engine import erasure
from ctxcache.tiers import MemoryTier
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import BS
from .test_delete_errors import Refusing, _accounted, store, toks
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


def test_a_retry_victim_that_cannot_leave_is_a_retry_again_at_its_next_refusal():
    """RAM, a slow middle tier whose deletes of ``bad`` keys are refused, a slow bottom tier. Parent
    block k is kept in the middle (a refused delete: a retry there) while the index serves it from
    RAM; then demoted onto its kept copy (no write, no admit: still a retry). A pass takes it first,
    finds the bottom tier down and k a parent: it stays."""
    hook = Refusing()
    top, mid, low = MemoryTier(1 << 20), FakeSlowTier(1 << 20, on_call=hook), FakeSlowTier(1 << 20)
    cache = ContextCache([top, mid, low], block_size=BS)
    slot, pl, lock = cache.slots[1], cache._engine.placement, cache._engine.lock
    chain = toks(0) + toks(1)
    cache.store(chain, [[np.full(16, i, np.float32)] for i in range(2)], "default", 0)
    (k,) = [n.key for n in cache._engine.index if n.depth == 0]
    for t in (0, 1):  # both blocks down to the bottom tier; k's delete from the middle refused
        hook.bad = {k} if t == 1 else set()
        with lock:
            assert pl.make_room(t, 1 << 20) is False  # all it can: the tier empties
        assert cache.flush(10)
    assert k in slot.retry and k in mid.store
    with cache.lookup(chain) as m:  # hits below: both promoted into RAM (the bottom keeps copies)
        assert m.n_blocks == 2
    with lock:
        pl.make_room(0, 1 << 20)  # k onto its kept copy in the middle; its child written there
    assert cache.flush(10) and cache._engine.index.get(k).tier == 1 and k in slot.retry
    low.down = True
    with lock:
        assert not pl.make_room(1, 1)  # k first: no room below, a parent: it stays
    low.down = False
    with lock:
        pl.make_room(1, 1 << 20)  # k's delete (still bad) refused: a first refusal since it stayed
    assert cache.flush(10)
    assert k in slot.retry and k in mid.store  # before the fix: no retry ("refused again")
    cache.close()


def test_a_retry_victim_whose_demotion_write_fails_is_no_longer_retrying():
    """The queued road (already right: its report settles it): an orphan kept by a refused delete
    is the next pass's first victim, written back below, and that write is refused."""
    hook = Refusing()
    upper, lower = FakeSlowTier(1 << 20, on_call=hook), Held(1 << 20)
    cache = ContextCache([upper, lower], block_size=BS)
    slot, pl, lock = cache.slots[0], cache._engine.placement, cache._engine.lock
    store(cache, 0)
    assert cache.flush(10)
    (k,) = list(upper.keys())
    hook.bad, lower.down = {k}, True
    with lock:
        assert pl.make_room(0, 1)  # nowhere below: evicted, its delete refused
    assert cache.flush(10) and k in slot.retry and k not in cache._engine.index
    hook.bad, lower.down, lower.fail = set(), False, 1
    with lock:
        assert pl.make_room(0, 1) and k in slot.retrying  # written back below; refused
    assert cache.flush(10)
    assert k not in slot.retrying and k not in slot.retry and slot.holds(k) and k in upper.store
    assert cache.stats()["write_errors"] == 1 and slot.used() == upper.used_bytes
    _accounted(upper)
    cache.close()
