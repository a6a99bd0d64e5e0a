"""The publisher's fast lane (events/fastlane.py) against a real redis-server: the entries it
writes are the thread's (same fields, same order, seq without gaps), the registry is refreshed,
replies left unread are read by the thread, a broken lane counts its unanswered batches as
dropped and resyncs, and the pure-Python socket calls (no compiled module) write the same."""

from __future__ import annotations

import time

import pytest
import redis

from ctxcache.events import BlockStored, EventBatch, WorkerStarted
from ctxcache.events.codec import decode_events
from ctxcache.events.streams import StreamsPublisher, registry_key


def _batch(seq: int, epoch: str = "e1") -> EventBatch:
    if seq == 1:
        return EventBatch("w", epoch, 1, (WorkerStarted(("ram",), (), 4),), 1000.5)
    keys = tuple((seq * 100 + j).to_bytes(16, "big") for j in range(3))
    return EventBatch("w", epoch, seq, (BlockStored(keys, "ram", None, 4, 300),), 1000.0 + seq / 8)


def _drain(pub: StreamsPublisher) -> None:
    deadline = time.monotonic() + 10
    while pub.stats()["queued"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not pub.stats()["queued"]


@pytest.mark.parametrize("native", [True, False])
def test_the_lane_writes_the_threads_entries_in_order(redis_url, native):
    client = redis.Redis.from_url(redis_url)
    prefix = f"fl{int(native)}:"
    pub = StreamsPublisher(client, "w", prefix=prefix)
    assert pub._lane is not None
    if not native:
        pub._lane.native = None
    pub.publish(_batch(1))  # the first goes the thread's way, with the first snapshot
    _drain(pub)
    for seq in range(2, 40):
        pub.publish(_batch(seq))
        if seq % 7 == 0:
            time.sleep(0.02)
    assert pub._lane.conn is not None  # the lane was used
    _drain(pub)  # the last replies, read by the thread
    entries = client.xrange(f"{prefix}{{w}}:s")
    assert [int(f[b"q"]) for _, f in entries] == list(range(1, 40))
    for (_, f), seq in zip(entries, range(1, 40)):
        b = _batch(seq)
        assert f[b"e"] == b"e1" and float(f[b"t"]) == b.ts and decode_events(f[b"v"]) == b.events
    assert pub.last_id == entries[-1][0].decode() and pub.published == 1 + 38
    assert client.zscore(registry_key(prefix), "w") is not None
    pub.close()


def _lane_after_one_batch(redis_url: str, prefix: str) -> tuple[redis.Redis, StreamsPublisher]:
    """A publisher whose first batch went out and was answered: the next ones take the lane."""
    client = redis.Redis.from_url(redis_url)
    pub = StreamsPublisher(client, "w", prefix=prefix)
    pub.publish(_batch(1))
    _drain(pub)
    return client, pub


def test_a_broken_lane_drops_what_it_had_unanswered_and_resyncs(redis_url):
    client, pub = _lane_after_one_batch(redis_url, "flb:")
    pub.publish(_batch(2))
    _drain(pub)
    snaps = pub.snapshots
    with pub._cond:
        assert pub._lane is not None and pub._lane.conn is not None
        pub.publish(_batch(3))  # sent, its reply unread (the lock is held)
        pub._lane.sock.close()  # the connection dies under it
        pub.publish(_batch(4))  # the lane fails: 3 is dropped, 4 goes the thread's way
    _drain(pub)
    deadline = time.monotonic() + 5
    while pub.snapshots == snaps and time.monotonic() < deadline:
        time.sleep(0.01)
    st = pub.stats()
    assert st["dropped"] == 1 and st["errors"] >= 1 and pub.snapshots > snaps
    seqs = [int(f[b"q"]) for _, f in client.xrange("flb:{w}:s")]
    assert seqs[:2] == [1, 2] and seqs[-1] == 4  # 3 may have landed before the socket closed
    pub.publish(_batch(5))  # the lane again, on a new connection
    _drain(pub)
    assert [int(f[b"q"]) for _, f in client.xrange("flb:{w}:s")][-1] == 5
    pub.close()


def test_a_batch_the_encoder_refuses_goes_the_threads_way_and_the_lane_stays(redis_url):
    client, pub = _lane_after_one_batch(redis_url, "fle:")
    pub.publish(_batch(2))
    assert pub._lane is not None and pub._lane.inflight  # on the lane, its reply not read yet
    bad = EventBatch("w", "e1", 3, (BlockStored((b"k" * 16, b"k"), "ram"),), 1.0)  # mixed key widths
    pub.publish(bad)
    assert pub._q and pub._lane.conn is not None  # queued for the thread; the lane is as it was
    deadline = time.monotonic() + 5
    while not pub.stats()["errors"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pub.stats()["errors"] >= 1  # the thread's write fails as it always did
    assert [int(f[b"q"]) for _, f in client.xrange("fle:{w}:s")] == [1, 2]
    pub.close(timeout=0.5)
