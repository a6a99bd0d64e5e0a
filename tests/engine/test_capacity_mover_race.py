"""A slow tier's capacity holds while the mover's deletes land. The mover deletes outside the
engine lock, so a tier's byte count can drop before the mover reports and the delete's outflow
reservation is settled; for that moment ``Slot.used()`` counted the block as gone twice, and room
made against it (a capacity pass without tenants) left the tier one block over its capacity
until the next drain. The quota twin is test_quota_mover_race.py."""

from __future__ import annotations

from collections.abc import Hashable

from ctxcache import ContextCache
from ctxcache.tiers import MemoryTier

from .gates import GatedDisk
from .tenancy_util import BS, ask, prompt_of

BLOCK = 64  # bytes the hot tier charges for one test block
BLOB = 256  # bytes of its blob on disk
FULL = 4 * BLOB  # the disk tier's capacity


def _full_disk(tmp_path) -> tuple[ContextCache, GatedDisk]:
    disk = GatedDisk(
        FULL, path=tmp_path / "disk", fsync=False, high=1.0, low=1.0, write="demote"
    )  # demotions race here
    cache = ContextCache([MemoryTier(1 << 20), disk], block_size=BS)  # no tenants: capacity passes only
    for i in range(3):
        ask(cache, "default", prompt_of(i))  # 12 blocks in RAM
    for _ in range(4):
        _demote_one(cache)
    cache.flush()
    assert {disk.nbytes(k) for k in disk.keys()} == {BLOB}  # noqa: SIM118 (a Tier method)
    assert disk.used_bytes == cache.slots[1].used() == FULL
    disk.gate.clear()
    _demote_one(cache)  # the disk is full: its oldest block leaves, and that delete waits at the gate
    assert disk.entered.wait(10) and len(disk.waiting) == 1
    return cache, disk


def _demote_one(cache: ContextCache) -> None:
    with cache._engine.lock:
        assert cache._engine.placement.make_room(0, BLOCK)


def _settled(cache: ContextCache, disk: GatedDisk) -> int:
    disk.gate.set()
    assert cache.flush(10)
    assert disk.used_bytes == cache.slots[1].used()
    return disk.used_bytes


def test_a_delete_landing_before_its_report_does_not_let_a_demotion_overfill_the_tier(tmp_path):
    cache, disk = _full_disk(tmp_path)
    with cache._engine.lock:
        disk.land()
        assert cache.slots[1].used() <= FULL
        _demote_one(cache)  # one more block into the full disk: it must make room first
    assert _settled(cache, disk) <= FULL
    assert len(disk) == 4
    cache.close()


def test_a_delete_landing_mid_pass_does_not_end_a_capacity_pass_early(tmp_path):
    cache, disk = _full_disk(tmp_path)
    pl = cache._engine.placement
    can = pl._can[1]

    def landing_now(key: Hashable) -> bool:  # the delete lands after the pass set its goal
        if disk.waiting:
            disk.land()
        return can(key)

    pl._can[1] = landing_now
    with cache._engine.lock:
        goal = cache.slots[1].used() - 2 * BLOB
        assert pl.make_room(1, 2 * BLOB)
    pl._can[1] = can
    assert _settled(cache, disk) <= goal
    cache.close()


def test_a_tiers_bytes_read_exact_while_a_delete_is_in_flight(tmp_path):
    """Neither low (the landing counted with the outflow still reserved) nor high (the outflow
    settled before the landing): a lookup reading ``used`` in between sees the tier as it is."""
    cache, disk = _full_disk(tmp_path)  # logically: 3 of the first 4 blocks and the one demoted in
    with cache._engine.lock:
        assert cache.slots[1].used() == FULL
        disk.land()
        assert cache.slots[1].used() == FULL
    assert _settled(cache, disk) == FULL
    cache.close()
