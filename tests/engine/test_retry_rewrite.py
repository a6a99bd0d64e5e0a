"""A block whose delete was refused is the first victim of the next pass (``Slot.retry``). Placed in
that tier again (stored, promoted, found there by a lookup), it is wanted: it leaves the retry list,
or the pass after evicted the block the cache had just been asked to keep.

A rewrite that fails leaves the old blob stored (disk writes are atomic renames; a refused Redis
SET changes nothing): the tier keeps charging it and the block stays served from it, as before the
rewrite. Forgetting it left the file on disk uncharged until a restart.

A delete queued behind a write of the same key that has not landed (the erasure or TTL of a block
just stored) reserves the bytes the write will charge: it reserved 0, and ``Slot.used`` counted the
block until the delete was sent. Should the write fail, the delete frees only what the tier holds."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import pytest

from ctxcache import ContextCache
from ctxcache.engine import erasure
from ctxcache.tiers import DiskTier
from ctxcache.tiers.fake import FakeSlowTier

from .tenancy_util import BS
from .test_delete_errors import Refusing, _accounted, _refuse_block_unlinks, store, toks
from .test_write_mover_race import _blob_size


def _kept(cache: ContextCache, hook: Refusing, tier: FakeSlowTier) -> bytes:
    """Evict (or demote) the top tier's oldest block with its delete refused: it stays there, a retry."""
    key = next(iter(tier.keys()))
    hook.bad.add(key)
    with cache._engine.lock:
        assert cache._engine.placement.make_room(0, 1)
    assert cache.flush(10)
    hook.bad.clear()
    assert key in cache.slots[0].retry and key in tier.store
    assert isinstance(key, bytes)
    return key


@pytest.mark.parametrize("again", ["store", "lookup"])
def test_a_refused_block_stored_or_found_again_is_not_the_next_victim(again):
    """``lookup``: the index lacks the block; the lookup finds it on the tier and indexes it there."""
    blob, hook = _blob_size(), Refusing()
    tier = FakeSlowTier(4 * blob, on_call=hook, high=1.0, low=1.0)
    cache = ContextCache([tier], block_size=BS)
    for i in range(3):
        store(cache, i)
        assert cache.flush(10)
    k0 = _kept(cache, hook, tier)
    assert k0 not in cache._engine.index
    if again == "store":
        store(cache, 0)  # a rewrite of the kept blob: 3 blocks stored, room for one more
    else:
        with cache.lookup(toks(0)) as m:
            assert m.n_blocks == 1
    assert cache.flush(10)
    store(cache, 3)  # fits
    assert cache.flush(10) and len(tier.store) == 4
    k1 = next(k for k in tier.keys() if k != k0)  # noqa: SIM118 (a Tier method); the least recently used now
    hook.deletes.clear()
    store(cache, 4)  # needs room: one victim
    assert cache.flush(10)
    assert hook.deletes == [k1]  # before the fix: [k0], the block just stored (or hit)
    assert k0 in tier.store and k0 not in cache.slots[0].retry
    with cache.lookup(toks(0)) as m:
        assert m.n_blocks == 1 and float(np.asarray(m.payloads[0][0])[0]) == 0
    assert cache.slots[0].used() == tier.used_bytes == 4 * blob
    _accounted(tier)
    cache.close()


def test_a_refused_block_promoted_onto_its_kept_copy_is_not_the_next_victim():
    blob, hook = _blob_size(), Refusing()
    upper = FakeSlowTier(4 * blob, on_call=hook, high=1.0, low=1.0)
    lower = FakeSlowTier(1 << 20)
    cache = ContextCache([upper, lower], block_size=BS)
    for i in range(3):
        store(cache, i)
        assert cache.flush(10)
    k0 = _kept(cache, hook, upper)  # demoted; its delete from the upper tier refused
    with cache.lookup(toks(0)) as m:  # a hit below: promoted onto the kept copy
        assert m.usage.by_tier == {lower.name: BS}
    assert cache.flush(10)
    store(cache, 3)
    assert cache.flush(10) and len(upper.store) == 4
    k1 = next(k for k in upper.keys() if k != k0)  # noqa: SIM118 (a Tier method)
    hook.deletes.clear()
    store(cache, 4)  # needs room in the upper tier: one block goes down
    assert cache.flush(10)
    assert hook.deletes == [k1]  # before the fix: [k0]
    with cache.lookup(toks(0)) as m:
        assert m.usage.by_tier == {upper.name: BS}
    assert cache.slots[0].used() == upper.used_bytes == 4 * blob
    cache.close()


def _on_disk(disk: DiskTier) -> int:
    """What the tier charges is what its directory holds."""
    files = list(disk.root.rglob("*.blk"))
    assert len(files) == len(disk) and disk.used_bytes == sum(f.stat().st_size for f in files)
    return len(files)


@pytest.mark.parametrize("old", ["orphan", "kept"])
def test_a_failed_rewrite_keeps_the_old_blob_charged_and_served(tmp_path, monkeypatch, old):
    """``orphan``: a block an earlier run left, stored again after a restart without a lookup;
    ``kept``: a block whose eviction's unlink was refused, stored again."""
    path = tmp_path / "d"
    if old == "orphan":
        first = ContextCache([DiskTier(1 << 20, path=path, fsync=False)], block_size=BS)
        for i in range(2):
            store(first, i)
        first.close()
    disk = DiskTier(1 << 20, path=path, fsync=False)
    cache = ContextCache([disk], block_size=BS)
    slot = cache.slots[0]
    if old == "kept":
        for i in range(2):
            store(cache, i)
            assert cache.flush(10)
        real = _refuse_block_unlinks(monkeypatch)
        with cache._engine.lock:
            assert cache._engine.placement.make_room(0, 1)  # block 0 leaves the index, stays stored
        assert cache.flush(10)
        monkeypatch.setattr(pathlib.Path, "unlink", real)
    assert _on_disk(disk) == 2 and slot.used() == disk.used_bytes
    assert len(cache._engine.index) == (0 if old == "orphan" else 1)

    def no_space(kb: bytes, blob: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(disk, "_write", no_space)
    store(cache, 0)  # a rewrite of block 0's file; the write fails before its rename
    assert cache.flush(10)
    monkeypatch.undo()
    assert _on_disk(disk) == 2  # before the fix: 2 files, 1 charged
    s = cache.stats()
    assert (s["write_errors"], s["lost"]) == (1, 0)
    assert slot.used() == disk.used_bytes and slot.tenant_used("default") == disk.used_bytes
    with cache.lookup(toks(0)) as m:  # served from the old file (before the fix: lost)
        assert m.n_blocks == 1 and float(np.asarray(m.payloads[0][0])[0]) == 0
    assert cache.stats()["discovered"] == 0 and cache.flush(10)
    with cache._engine.lock:  # and evicted like any block: file and charge go together
        assert cache._engine.placement.make_room(0, disk.used_bytes)
    assert cache.flush(10)
    assert _on_disk(disk) == 0 and slot.used() == 0 and not slot.by_tenant
    cache.close()


class Held(FakeSlowTier):
    """Its writes wait while ``gate`` is clear (``entered`` set); its next ``fail`` calls are refused."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.gate, self.entered, self.fail = threading.Event(), threading.Event(), 0
        self.gate.set()

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        if not self.gate.is_set():
            self.entered.set()
            assert self.gate.wait(10), "the test never opened the gate"
        if self.fail:
            self.fail -= 1
            return [False] * len(items)
        return super().put_blobs(items)


@pytest.mark.parametrize("fail", [False, True])
def test_a_delete_queued_behind_an_unlanded_write_counts_the_block_gone(fail):
    """Block A is stored (its write held), B is demoted (its write below held next), then A is
    erased: its delete is queued behind its write. ``fail``: A's write is refused."""
    blob = _blob_size()
    upper, lower = Held(1 << 20), Held(1 << 20)
    cache = ContextCache([upper, lower], block_size=BS)
    slot, pl = cache.slots[0], cache._engine.placement
    store(cache, 1)  # B
    assert cache.flush(10)
    upper.gate.clear()
    lower.gate.clear()
    store(cache, 0)  # A: its write waits before it is sent
    assert upper.entered.wait(10)
    with cache._engine.lock:
        assert pl.make_room(0, 1)  # B goes down (A is in flight): B's write waits below
        (a,) = [k for k in pl.mover.pending if k not in upper]
        assert erasure._erase_key(cache._engine, a)  # A's delete, queued behind its write
        assert slot.used() == 0  # before the fix: one blob, A's, until its delete was sent
    upper.fail = int(fail)
    upper.gate.set()  # A's write lands (or is refused) and reports; B's write waits below
    assert lower.entered.wait(10)
    with cache._engine.lock:
        assert slot.used() == 0 and upper.used_bytes == (blob if fail else 2 * blob)
    lower.gate.set()
    assert cache.flush(10)
    assert slot.used() == upper.used_bytes == 0 and not upper.store
    assert (slot.inflow, slot.outflow) == (0, 0) and cache.slots[1].used() == lower.used_bytes == blob
    assert cache.stats()["write_errors"] == fail
    _accounted(upper)
    _accounted(lower)
    cache.close()


def test_a_failed_write_leaves_a_store_queued_behind_it_alone():
    """A block stored (its write held and then refused), erased, and stored again: the second store's
    write, queued behind, lands; the first one's report must not take its charge or its place."""
    upper = Held(1 << 20)
    cache = ContextCache([upper], block_size=BS)
    slot, pl = cache.slots[0], cache._engine.placement
    upper.gate.clear()
    store(cache, 0)
    assert upper.entered.wait(10)
    with cache._engine.lock:
        (a,) = list(pl.mover.pending)
        assert erasure._erase_key(cache._engine, a)
    store(cache, 0)  # again: queued behind the delete
    upper.fail = 1
    upper.gate.set()
    assert cache.flush(10) and a in upper.store
    s = cache.stats()
    assert (s["write_errors"], s["lost"]) == (1, 0)  # before the fix: lost 1
    assert slot.holds(a) and slot.used() == upper.used_bytes == slot.tenant_used("default")
    with cache.lookup(toks(0)) as m:
        assert m.n_blocks == 1 and float(np.asarray(m.payloads[0][0])[0]) == 0
    _accounted(upper)
    cache.close()
