"""The router's block index: prefixes by worker and tier, epochs, gaps, expiry, growth."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

from ctxcache.events import BlockRemoved, BlockStored, EventBatch, Heartbeat, TierCleared, WorkerStarted
from ctxcache.router.index import FAST, SHARED, SLOW, BlockIndex, IndexFullError
from ctxcache.router.table import KeyTable, key_arrays

TIERS = WorkerStarted(tiers=("memory", "disk", "redis"), shared=("redis",))


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Feed:
    """Numbered batches for one worker, as a publisher sends them."""

    def __init__(self, index: BlockIndex, worker: str, epoch: str = "100-aa") -> None:
        self.index, self.worker, self.epoch, self.seq = index, worker, epoch, 0

    def send(self, *events: object) -> bool:
        self.seq += 1
        return self.index.apply(EventBatch(self.worker, self.epoch, self.seq, tuple(events)))  # type: ignore[arg-type]


def keys(n: int) -> list[bytes]:
    return [os.urandom(16) for _ in range(n)]


def test_longest_consecutive_prefix_per_worker_and_tier():
    idx = BlockIndex()
    ks = keys(10)
    a, b = Feed(idx, "a"), Feed(idx, "b")
    a.send(TIERS, BlockStored(tuple(ks[:6]), "memory"), BlockStored(tuple(ks[6:8]), "disk"))
    b.send(TIERS, BlockStored(tuple(ks[:3]), "memory"), BlockStored(tuple(ks[4:10]), "memory"))
    m = idx.prefix(ks)
    assert (m.workers["a"].blocks, m.workers["a"].fast, m.workers["a"].slow) == (8, 6, 2)
    assert m.workers["b"].blocks == 3  # block 3 missing: blocks 4.. do not count
    assert list(m.tiers("a")) == [FAST] * 6 + [SLOW] * 2
    assert m.best() == 8
    assert idx.prefix(keys(3)).best() == 0


def test_a_block_in_ram_and_on_disk_counts_as_ram():
    idx = BlockIndex()
    ks = keys(4)
    a = Feed(idx, "a")
    a.send(TIERS, BlockStored(tuple(ks), "disk"), BlockStored(tuple(ks[:2]), "memory"))
    p = idx.prefix(ks).workers["a"]
    assert (p.blocks, p.fast, p.slow) == (4, 2, 2)


def test_shared_store_blocks_count_for_every_attached_worker():
    idx = BlockIndex()
    ks = keys(6)
    a, b, c = Feed(idx, "a"), Feed(idx, "b"), Feed(idx, "c")
    a.send(TIERS, BlockStored(tuple(ks[:2]), "memory"), BlockStored(tuple(ks[:5]), "redis"))
    b.send(TIERS)
    c.send(WorkerStarted(tiers=("memory",)))  # not attached to the shared store
    m = idx.prefix(ks)
    assert (m.workers["a"].blocks, m.workers["a"].fast, m.workers["a"].shared) == (5, 2, 3)
    assert (m.workers["b"].blocks, m.workers["b"].shared) == (5, 5)
    assert m.workers["c"].blocks == 0
    assert list(m.tiers("b")) == [SHARED] * 5
    b.send(TierCleared("redis", reason="lost"))  # b lost its connection: a still reads the store
    m = idx.prefix(ks)
    assert (m.workers["a"].blocks, m.workers["b"].blocks) == (5, 0)
    a.send(BlockRemoved((ks[3],), "redis"))
    assert idx.prefix(ks).workers["a"].blocks == 3


def test_removals_and_tier_clears_touch_only_that_worker_and_tier():
    idx = BlockIndex()
    ks = keys(5)
    a, b = Feed(idx, "a"), Feed(idx, "b")
    for f in (a, b):
        f.send(TIERS, BlockStored(tuple(ks), "memory"), BlockStored(tuple(ks), "disk"))
    a.send(BlockRemoved((ks[2],), "memory", "demoted"))
    p = idx.prefix(ks).workers["a"]
    assert (p.blocks, p.fast, p.slow) == (5, 4, 1)  # block 2 is read from disk now
    a.send(TierCleared("disk"))
    assert idx.prefix(ks).workers["a"].blocks == 2
    a.send(TierCleared("memory"))
    assert idx.prefix(ks).workers["a"].blocks == 0
    assert idx.prefix(ks).workers["b"].blocks == 5


def test_a_new_epoch_forgets_the_old_one_and_late_batches_are_ignored():
    idx = BlockIndex()
    ks = keys(4)
    old = Feed(idx, "a", "100-aa")
    old.send(TIERS, BlockStored(tuple(ks), "memory"))
    new = Feed(idx, "a", "200-bb")
    new.send(TIERS, BlockStored(tuple(ks[:1]), "memory"))
    assert idx.prefix(ks).workers["a"].blocks == 1
    assert not old.send(BlockStored(tuple(ks), "memory"))  # the dead process's late batch
    assert idx.prefix(ks).workers["a"].blocks == 1 and idx.ignored == 1


def test_duplicates_are_ignored_and_gaps_counted():
    idx = BlockIndex()
    ks = keys(3)
    assert idx.apply(EventBatch("a", "1-x", 1, (TIERS, BlockStored((ks[0],), "memory"))))
    assert not idx.apply(EventBatch("a", "1-x", 1, (BlockRemoved((ks[0],), "memory"),)))  # a replayed duplicate
    assert idx.prefix(ks).workers["a"].blocks == 1
    assert idx.apply(EventBatch("a", "1-x", 4, (BlockStored((ks[1],), "memory"),)))
    assert idx.workers["a"].gaps == 2 and idx.prefix(ks).workers["a"].blocks == 2


def test_silent_workers_expire_and_heartbeats_keep_them():
    clock = Clock()
    idx = BlockIndex(worker_ttl_s=10, clock=clock)
    ks = keys(2)
    a, b = Feed(idx, "a"), Feed(idx, "b")
    a.send(TIERS, BlockStored(tuple(ks), "memory"))
    b.send(TIERS, BlockStored(tuple(ks), "memory"))
    clock.t = 8
    b.send(Heartbeat())
    clock.t = 12
    assert idx.expire() == ["a"]
    assert set(idx.prefix(ks).workers) == {"b"}
    c = Feed(idx, "c")  # the freed bit is reused without leaking a's blocks
    c.send(TIERS)
    assert idx.prefix(ks).workers["c"].blocks == 0


def test_at_most_64_workers():
    idx = BlockIndex()
    for i in range(64):
        Feed(idx, f"w{i}").send(TIERS)
    with pytest.raises(IndexFullError):
        Feed(idx, "w64").send(TIERS)
    idx.remove_worker("w0")
    Feed(idx, "w64").send(TIERS)


def test_random_operations_match_a_dict_model_through_growth():
    rng = random.Random(7)
    idx = BlockIndex(capacity=1024)
    pool = keys(20_000)
    model: dict[bytes, set[str]] = {}
    feeds = {w: Feed(idx, w) for w in "abc"}
    for f in feeds.values():
        f.send(WorkerStarted(tiers=("memory",)))
    for _ in range(400):
        w = rng.choice("abc")
        batch = rng.sample(pool, rng.randint(1, 200))
        if rng.random() < 0.7:
            feeds[w].send(BlockStored(tuple(batch), "memory"))
            for k in batch:
                model.setdefault(k, set()).add(w)
        else:
            feeds[w].send(BlockRemoved(tuple(batch), "memory"))
            for k in batch:
                model.get(k, set()).discard(w)
    for k in rng.sample(pool, 2000):
        m = idx.prefix([k])
        assert {w for w, p in m.workers.items() if p.blocks} == model.get(k, set())
    assert idx.stats()["load"] <= 0.8


def test_apply_many_equals_apply_one_by_one():
    ks = keys(3000)
    batches = []
    for epoch in ("100-a", "200-b"):
        for seq, i in enumerate(range(0, 3000, 100), start=1):
            evs: list[object] = [BlockStored(tuple(ks[i : i + 100]), "memory")]
            if i % 700 == 0:
                evs.append(BlockRemoved(tuple(ks[i : i + 50]), "memory"))
            batches.append(EventBatch("a", epoch, seq, tuple(evs)))  # type: ignore[arg-type]
    one, many = BlockIndex(), BlockIndex()
    for b in batches:
        one.apply(b)
    assert many.apply_many(batches) == len(batches)
    for i in range(0, 3000, 37):
        assert one.prefix(ks[i : i + 40]).workers["a"] == many.prefix(ks[i : i + 40]).workers["a"]


def test_dead_slots_go_at_the_next_rehash():
    t = KeyTable(1024)
    lo, hi = key_arrays(keys(700))
    slots = t.insert(lo, hi)
    t.fast[slots[:600]] = 1
    t.rehash(0)
    assert (t.find(lo[:600], hi[:600]) >= 0).all() and (t.find(lo[600:], hi[600:]) < 0).all()
    assert t.used == 600


def test_keys_must_be_16_bytes():
    with pytest.raises(ValueError, match="16 bytes"):
        key_arrays([b"short"])
    lo, _ = key_arrays([bytes(16)])
    assert lo[0] == 1  # the all-zero key does not read as an empty slot
    assert np.array_equal(BlockIndex().lookup_slots([]), np.empty(0))


def test_keys_sharing_their_low_word_stay_distinct_in_one_insert():
    same_lo = [bytes(8) + i.to_bytes(8, "little") for i in range(1, 4)]  # one low word, three keys
    t = KeyTable(1024)
    lo, hi = key_arrays(same_lo)
    slots = t.insert(lo, hi)
    assert len(set(slots.tolist())) == 3 and t.used == 3
    assert np.array_equal(t.find(lo, hi), slots)
    assert np.array_equal(t.insert(lo, hi), slots) and t.used == 3  # found again: no slot claimed twice
