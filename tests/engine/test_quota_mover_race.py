"""A tenant's quota on a slow tier holds while the mover's I/O lands: the mover deletes blocks
outside the engine lock, so a tier's byte count can drop in the middle of a room-making pass
(before the mover reports and its reservation is settled). The quota counts the tenant's own
charges, which only change under the lock. (The flake of test_quotas_hold_on_slow_tiers[redis]:
one block more than the quota, once, under load.)"""

from __future__ import annotations

from ctxcache.tiers import DiskTier

from .gates import GatedDisk
from .tenancy_util import ask, cache_with, prompt_of, tier_of

BLOCK = 64  # bytes the hot tier charges for one test block
BLOB = 256  # bytes of its blob on disk


def _demote_one(cache) -> None:
    with cache._engine.lock:
        assert cache._engine.placement.make_room(0, BLOCK)


def test_a_delete_landing_mid_room_making_does_not_let_a_tenant_pass_its_quota(tmp_path):
    disk = GatedDisk(1 << 20, path=tmp_path / "disk", fsync=False)
    ram = tier_of("memory", tmp_path, capacity=8 * BLOCK, high=1.0, low=1.0)
    cache = cache_with([ram, disk], {"b": {"quota": {"disk": 4 * BLOB}}})
    for i in range(3):
        ask(cache, "b", prompt_of(i))  # 12 blocks: 4 of them demoted to disk
    cache.flush()
    quota = 4 * BLOB
    assert {disk.nbytes(k) for k in disk.keys()} == {BLOB}  # noqa: SIM118 (a Tier method)
    assert cache.slots[1].tenant_used("b") == quota

    disk.gate.clear()
    _demote_one(cache)  # b's oldest disk block makes room: its delete waits at the gate
    assert disk.entered.wait(10) and len(disk.waiting) == 1
    pl = cache._engine.placement
    stages = pl._stages

    def landing_now(t, only):  # the mover's delete lands while room is being made (after its goal is set)
        if only == "b" and disk.waiting:
            DiskTier.delete_many(disk, [disk.waiting.pop()])
        return stages(t, only)

    pl._stages = landing_now
    _demote_one(cache)  # needs one more of b's disk blocks to leave
    assert not disk.waiting
    disk.gate.set()
    cache.flush()
    assert cache.slots[1].tenant_used("b") <= quota
    assert disk.used_bytes == cache.slots[1].tenant_used("b")
    cache.close()
