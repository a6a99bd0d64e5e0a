"""A slow tier's bytes stay counted once while the mover's writes land. The mover writes outside
the engine lock, so a tier's byte count grew before the mover reported and the write's inflow
reservation was settled; for that moment ``Slot.used()`` counted the block twice, and a store
made then was refused or evicted a block too many. The delete-side twin is
test_capacity_mover_race.py."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Any

from ctxcache import ContextCache
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import BS, ask, prompt_of


class HeldAfterWrite(FakeSlowTier):
    """Its writes land (the tier charges them), then wait for ``gate``, before the mover reports."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.gate, self.entered = threading.Event(), threading.Event()
        self.gate.set()

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
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
        assert tier.used_bytes == 4 * blob
        assert cache.slots[0].used() == 4 * blob  # was 5 blocks: the held one counted twice
    ask(cache, "default", prompt_of(2, 1))  # fits: no block to evict, nothing refused
    tier.gate.set()
    assert cache.flush(10)
    assert len(tier) == 5 and tier.used_bytes == cache.slots[0].used() == 5 * blob
    s = cache.stats()
    assert (s["evictions"], s["rejected"], s["stored_blocks"]) == (0, 0, 5)
    cache.close()
