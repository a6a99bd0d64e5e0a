"""A delete from a slow tier that raises (an unlink refused, an I/O error) leaves its block in
storage. The cache must keep charging the tier for it (its capacity figure stays true; a later
eviction pass retries the delete), count it in ``delete_errors``, and never take it for a failed
write: the block reached its destination and is served from there."""

from __future__ import annotations

import pathlib
from collections.abc import Hashable
from typing import Any

import numpy as np
import pytest

from ctxcache import ContextCache
from ctxcache.tiers import DiskTier, MemoryTier
from ctxcache.tiers.fake import FakeSlowTier
from ctxcache.tiers.fake import RefuseDeletes as Refuse  # also imported by the breaker tests

from .tenancy_util import BS, ask, cache_with, prompt_of


def toks(i: int) -> list[int]:
    return [i * 1000 + j for j in range(BS)]


def store(cache: ContextCache, i: int) -> None:
    cache.store(toks(i), [[np.full(16, i, np.float32)]], "default", 0)


def _accounted(tier: FakeSlowTier) -> None:
    """What the tier charges for is exactly what its storage holds."""
    assert set(tier.keys()) == set(tier.store)  # noqa: SIM118 (a Tier method)
    assert tier.used_bytes == sum(len(b) for b in tier.store.values())


def test_a_refused_eviction_delete_is_counted_and_the_block_stays_charged_until_a_retry():
    refuse = Refuse()
    probe = ContextCache([FakeSlowTier(1 << 20)], block_size=BS)
    store(probe, 0)
    assert probe.flush(10)
    blob = probe.slots[0].used()  # one block's blob
    tier = FakeSlowTier(4 * blob, on_call=refuse, high=1.0, low=1.0)
    cache = ContextCache([tier], block_size=BS)
    for i in range(4):  # one at a time: a write landing while the next store makes room counts twice until reported
        store(cache, i)
        assert cache.flush(10)
    assert len(tier.store) == 4 and not refuse.refused
    store(cache, 4)  # it needs room: the oldest block is evicted, and its delete raises
    assert cache.flush(10)
    s = cache.stats()
    assert len(tier.store) == 5
    _accounted(tier)  # before the fix: 4 blocks charged, 5 stored
    assert (s["write_errors"], s["lost"], s["evictions"]) == (0, 0, 1)
    assert len(set(refuse.refused)) == 1 and s["delete_errors"] == 1
    assert cache.slots[0].used() == tier.used_bytes == 5 * blob  # the truth: one block over capacity
    (k,) = set(refuse.refused)
    assert cache.slots[0].holds(k) and cache.slots[0].owner(k) == "default"  # charged to its owner again
    # This store makes room for the left-over block too: two victims, both refused, after the
    # left-over block itself, tried first but not counted on (refused again).
    store(cache, 5)
    assert cache.flush(10)
    assert cache.stats()["delete_errors"] == 4 and len(tier.store) == 6
    _accounted(tier)
    refuse.on = False  # the disk recovers: later passes delete what is left over
    for i in range(6, 14):
        store(cache, i)
        assert cache.flush(10)
    assert not set(refuse.refused) & set(tier.store)
    _accounted(tier)
    assert tier.used_bytes <= 4 * blob and cache.stats()["delete_errors"] == 4
    cache.close()


def test_a_refused_delete_after_a_demotion_between_slow_tiers_is_not_a_write_error():
    refuse = Refuse()
    upper = FakeSlowTier(1 << 20, on_call=refuse)
    lower = FakeSlowTier(1 << 20)
    cache = ContextCache([upper, lower], block_size=BS)
    for i in range(3):
        store(cache, i)
    assert cache.flush(10)
    keys = list(upper.keys())
    with cache._engine.lock:  # the upper tier needs room: all three go down; each source delete raises
        assert cache._engine.placement.make_room(0, upper.used_bytes)
    assert cache.flush(10)
    s = cache.stats()
    # Before the fix: the batch stopped at the first refused delete, then each move counted as a
    # failed write and its block LOST, although both tiers held it.
    assert (s["write_errors"], s["lost"], s["demotions"]) == (0, 0, 3)
    assert len(set(refuse.refused)) == 3 and s["delete_errors"] == 3
    assert set(lower.store) == set(upper.store) == set(keys)
    _accounted(upper)
    _accounted(lower)
    for i in range(3):  # served from the tier it was moved to
        with cache.lookup(toks(i)) as m:
            assert m.n_blocks == 1 and m.hit_tokens == BS
            assert float(np.asarray(m.payloads[0][0])[0]) == i
    assert cache.flush(10)  # the hits were copied up again (the writes replace the left-over blocks)
    _accounted(upper)
    refuse.on = False
    with cache._engine.lock:  # the upper tier's blocks are copies now: deleted again, for good
        cache._engine.placement.make_room(0, upper.used_bytes)
    assert cache.flush(10)
    assert not upper.store and upper.used_bytes == 0 and set(lower.store) == set(keys)
    cache.close()


def _refuse_block_unlinks(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make every unlink of a block file raise PermissionError; returns the real unlink."""
    real = pathlib.Path.unlink

    def unlink(self: pathlib.Path, missing_ok: bool = False) -> None:
        if self.suffix == ".blk":
            raise PermissionError(13, "Permission denied", str(self))
        real(self, missing_ok)

    monkeypatch.setattr(pathlib.Path, "unlink", unlink)
    return real


def test_a_disk_unlink_that_fails_leaves_the_file_charged(tmp_path, monkeypatch):
    disk = DiskTier(1 << 20, path=tmp_path / "d", fsync=False)
    cache = ContextCache([MemoryTier(1 << 20), disk], block_size=BS)
    for i in range(2):
        store(cache, i)
    with cache._engine.lock:
        assert cache._engine.placement.make_room(0, cache.slots[0].used())  # both blocks to disk
    assert cache.flush(10) and len(disk) == 2
    real = _refuse_block_unlinks(monkeypatch)
    with cache._engine.lock:
        assert cache._engine.placement.make_room(1, disk.used_bytes)  # evict both from the last tier
    assert cache.flush(10)
    files = list((tmp_path / "d").rglob("*.blk"))
    assert len(files) == 2 and len(disk) == 2 and disk.used_bytes == sum(f.stat().st_size for f in files)
    assert cache.stats()["delete_errors"] == 2
    assert cache.slots[1].used() == disk.used_bytes
    monkeypatch.setattr(pathlib.Path, "unlink", real)
    with cache._engine.lock:
        assert cache._engine.placement.make_room(1, disk.used_bytes)
    assert cache.flush(10)
    assert not list((tmp_path / "d").rglob("*.blk")) and disk.used_bytes == 0
    cache.close()


@pytest.mark.parametrize("n", [1, 3])
def test_the_other_deletes_of_a_batch_still_land(n):
    """One refused delete in a batch does not keep the batch's other blocks in storage."""
    bad: set[Hashable] = set()

    def hook(name: str, keys: tuple[Hashable, ...]) -> None:
        if name == "delete" and set(keys) & bad:
            raise OSError(5, "Input/output error")

    tier = FakeSlowTier(1 << 20, on_call=hook)
    cache = ContextCache([tier], block_size=BS)
    for i in range(4):
        store(cache, i)
    assert cache.flush(10)
    keys = list(tier.keys())
    bad.update(keys[:n])
    with cache._engine.lock:
        assert cache._engine.placement.make_room(0, tier.used_bytes)
    assert cache.flush(10)
    assert set(tier.store) == set(keys[:n])
    _accounted(tier)
    assert cache.stats()["delete_errors"] == n
    cache.close()


def test_a_tenant_erasure_whose_delete_fails_is_unverified_and_a_retry_finishes_it(tmp_path, monkeypatch):
    """The left-over block stays charged to its tenant, so erasing the tenant again finds it."""
    disk = DiskTier(1 << 20, path=tmp_path / "d", fsync=False)
    cache = cache_with([disk], {"a": {}, "b": {}})  # disk only: every delete goes through the mover
    ask(cache, "a", prompt_of(1))
    ask(cache, "b", prompt_of(2))
    assert cache.flush(10)
    a_bytes = cache.slots[0].tenant_used("a")
    real = _refuse_block_unlinks(monkeypatch)
    out = cache.erase_tenant("a")
    assert out["verified"] is False and cache.stats()["delete_errors"] == 4
    assert cache.slots[0].tenant_used("a") == a_bytes  # before the fix: 0, the files still there
    monkeypatch.setattr(pathlib.Path, "unlink", real)
    again = cache.erase_tenant("a")
    assert again["verified"] is True and again["erased_blocks"] == 4
    assert cache.slots[0].tenant_used("a") == 0 and cache.slots[0].tenant_used("b") > 0
    assert len(list((tmp_path / "d").rglob("*.blk"))) == 4  # b's blocks only
    assert cache.slots[0].used() == disk.used_bytes
    cache.close()


class Refusing:
    """``on_call`` hook: logs the keys of every delete call, in order, and refuses (raises) each call
    that holds a key of ``bad``."""

    def __init__(self) -> None:
        self.bad: set[Hashable] = set()
        self.deletes: list[Hashable] = []

    def __call__(self, name: str, keys: tuple[Hashable, ...]) -> None:
        if name == "delete":
            self.deletes += keys
            if set(keys) & self.bad:
                raise OSError(5, "Input/output error")


def _full_tier(blocks: int, clock: Any = None) -> tuple[ContextCache, FakeSlowTier, Refusing, int]:
    """A cache on one slow tier holding exactly ``blocks`` blocks, filled; the tier's oldest first.
    ``clock``: the engine's (None: the default)."""
    probe = ContextCache([FakeSlowTier(1 << 20)], block_size=BS)
    store(probe, 0)
    assert probe.flush(10)
    blob = probe.slots[0].used()
    hook = Refusing()
    tier = FakeSlowTier(blocks * blob, on_call=hook, high=1.0, low=1.0)
    cache = ContextCache([tier], block_size=BS, **({} if clock is None else {"clock": clock}))
    for i in range(blocks):
        # One at a time: a write that lands while the next store makes room is counted twice
        # (by the tier and as queued) until the mover reports it, so that store may find no room.
        store(cache, i)
        assert cache.flush(10)
    assert len(tier.store) == blocks and not hook.deletes
    return cache, tier, hook, blob


def test_the_block_whose_delete_failed_is_the_first_deleted_at_the_next_pass():
    cache, tier, hook, blob = _full_tier(4)
    k0 = next(iter(tier.keys()))  # the least recently used: the next victim
    hook.bad.add(k0)
    store(cache, 4)  # evicts k0; its delete fails: charged again, and (the policy's only insert) most recent
    assert cache.flush(10) and hook.deletes == [k0, k0] and cache.stats()["delete_errors"] == 1
    hook.bad.clear()  # the disk recovers
    hook.deletes.clear()
    store(cache, 5)  # the next pass: k0 goes first (before the fix: after every other block of the tier)
    assert cache.flush(10)
    assert hook.deletes[0] == k0 and k0 not in tier.store
    _accounted(tier)
    assert cache.slots[0].used() <= 4 * blob and cache.stats()["delete_errors"] == 1
    cache.close()


def test_a_tier_that_keeps_refusing_a_block_does_not_stall_passes_on_it():
    cache, tier, hook, blob = _full_tier(4)
    k0 = next(iter(tier.keys()))
    hook.bad.add(k0)  # for good: every delete of k0 fails
    store(cache, 4)
    assert cache.flush(10) and cache.slots[0].used() == 5 * blob  # one over: k0 is still stored
    hook.deletes.clear()
    store(cache, 5)  # tries k0 first, but makes its room from other blocks as well, and ends
    assert cache.flush(10)
    assert hook.deletes[0] == k0 and len(set(hook.deletes) - {k0}) == 2
    assert cache.slots[0].used() == tier.used_bytes == 4 * blob  # back within capacity, k0 included
    _accounted(tier)
    for i in range(6, 9):  # later passes take other blocks: k0 waits for its policy's turn
        hook.deletes.clear()
        store(cache, i)
        assert cache.flush(10)
        assert k0 not in hook.deletes and len(hook.deletes) == 1
        assert cache.slots[0].used() == tier.used_bytes == 4 * blob
    assert cache.stats()["delete_errors"] == 2 and k0 in tier.store
    hook.bad.clear()  # fixed at last: k0 leaves at its turn (two more passes of LRU order)
    for i in range(9, 12):
        store(cache, i)
        assert cache.flush(10)
    assert k0 not in tier.store and tier.used_bytes <= 4 * blob
    _accounted(tier)
    cache.close()
