"""A slow tier's bytes stay counted once while the mover's writes land. The mover writes outside
the engine lock, so a tier's byte count grew before the mover reported and the write's inflow
reservation was settled; for that moment ``Slot.used()`` counted the block twice, and a store
made then was refused or evicted a block too many. The tier must still hold (``len``, ``in``,
its stats) only what has landed: a fix that charged the block before the write was sent made a
queued demotion show as stored (test_hierarchy.py::test_queued_demotions_are_served_from_the_queue).
The delete-side twin is test_capacity_mover_race.py."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Any

from ctxcache import ContextCache
from ctxcache.tiers import MemoryTier
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import BS, ask, prompt_of


class HeldAfterWrite(FakeSlowTier):
    """Its writes land (the tier charges them), then wait for ``gate``, before the mover reports.
    While ``before`` is clear they wait before they are sent instead; ``sent`` is what it was sent."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.gate, self.before, self.entered = threading.Event(), threading.Event(), threading.Event()
        self.gate.set()
        self.before.set()
        self.sent: list[Hashable] = []

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        self.sent = [k for k, _ in items]
        if not self.before.is_set():
            self.entered.set()
            assert self.before.wait(10), "the test never opened the gate"
        out = super().put_blobs(items)
        if not self.gate.is_set():
            self.entered.set()
            assert self.gate.wait(10), "the test never opened the gate"
        return out


def _blob_size() -> int:
    tier = FakeSlowTier(1 << 20)
    cache = ContextCache([tier], block_size=BS)
    ask(cache, "default", prompt_of(0, 1))
    assert cache.flush(10)
    size = tier.used_bytes
    cache.close()
    return size


def _settled(cache: ContextCache, tier: HeldAfterWrite, t: int) -> None:
    tier.gate.set()
    tier.before.set()
    assert cache.flush(10)
    assert tier.used_bytes == cache.slots[t].used() and cache.slots[t].inflow == 0


def test_a_write_landing_before_its_report_is_counted_once():
    blob = _blob_size()
    tier = HeldAfterWrite(5 * blob, high=1.0, low=1.0)
    cache = ContextCache([tier], block_size=BS)
    ask(cache, "default", prompt_of(0, 3))
    assert cache.flush(10)
    tier.gate.clear()
    ask(cache, "default", prompt_of(1, 1))  # its write lands, then waits before the mover reports
    assert tier.entered.wait(10)
    with cache._engine.lock:
        assert tier.used_bytes == 4 * blob and len(tier) == 4
        assert cache.slots[0].used() == 4 * blob  # was 5 blocks: the held one counted twice
    ask(cache, "default", prompt_of(2, 1))  # fits: no block to evict, nothing refused
    _settled(cache, tier, 0)
    assert len(tier) == 5 and tier.used_bytes == 5 * blob
    s = cache.stats()
    assert (s["evictions"], s["rejected"], s["stored_blocks"]) == (0, 0, 5)
    cache.close()


def test_a_demotion_landing_before_its_report_is_counted_once():
    blob = _blob_size()
    tier = HeldAfterWrite(3 * blob, high=1.0, low=1.0)
    cache = ContextCache([MemoryTier(1 << 20), tier], block_size=BS)
    ask(cache, "default", prompt_of(0, 4))
    pl = cache._engine.placement
    with cache._engine.lock:
        assert pl.make_room(0, 1) and pl.make_room(0, 1)  # two blocks demoted to the slow tier
    assert cache.flush(10)
    tier.gate.clear()
    with cache._engine.lock:
        assert pl.make_room(0, 1)  # a third: it lands, then waits before the mover reports
    assert tier.entered.wait(10)
    with cache._engine.lock:
        assert (tier.used_bytes, cache.slots[1].used()) == (3 * blob, 3 * blob)  # was 4 blocks: over capacity
        assert not cache.slots[1].over_high()  # nothing to drain: the tier is exactly full
    _settled(cache, tier, 1)
    assert len(tier) == 3 and cache.stats()["evictions"] == 0
    cache.close()


def test_a_queued_write_is_counted_once_and_the_tier_holds_it_only_once_it_lands():
    blob = _blob_size()
    tier = HeldAfterWrite(5 * blob, high=1.0, low=1.0)
    cache = ContextCache([tier], block_size=BS)
    ask(cache, "default", prompt_of(0, 3))
    assert cache.flush(10)
    tier.before.clear()
    ask(cache, "default", prompt_of(1, 1))  # taken by the mover, not sent yet
    assert tier.entered.wait(10)
    with cache._engine.lock:
        assert (tier.used_bytes, len(tier), tier.sent[0] in tier) == (3 * blob, 3, False)
        assert cache.slots[0].used() == 4 * blob  # the slot counts it (reserved), the tier does not
        assert cache.stats()["tiers"]["fake-slow"]["blocks"] == 3
    _settled(cache, tier, 0)
    assert len(tier) == 4 and tier.sent[0] in tier
    cache.close()
