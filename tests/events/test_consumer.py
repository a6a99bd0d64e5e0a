"""The consumer against a real redis-server: replay after a restart, rebuild from the snapshot when
its position was trimmed away, a worker restart (new epoch) forgets the old blocks at every
consumer, a silent worker is forgotten, a dropped batch (a gap) is healed by the snapshot."""

from __future__ import annotations

import time

import redis

from ctxcache.events import BlockRemoved, BlockStored, EventBatch, Heartbeat, WorkerStarted
from ctxcache.events.consumer import Consumer
from ctxcache.events.streams import StreamsPublisher

SHARED = WorkerStarted(("ram", "redis"), ("redis",), 4, ("redis://x:1/0#p:",))


def _key(i: int) -> bytes:
    return i.to_bytes(16, "big")


class Worker:
    """A publisher driven by hand: batch n stores key n, every 5th removes key n - 3."""

    def __init__(self, client, name: str, epoch: str = "e1", **kw) -> None:
        self.pub = StreamsPublisher(client, name, prefix="t:", **kw)
        self.name, self.epoch, self.seq = name, epoch, 0
        self.send((SHARED,))

    def send(self, events) -> None:
        self.seq += 1
        self.pub.publish(EventBatch(self.name, self.epoch, self.seq, tuple(events), time.time()))

    def store(self, i: int) -> None:
        ev = [BlockStored((_key(i),), "redis", None, 4, 100)]
        if i % 5 == 0 and i >= 3:
            ev.append(BlockRemoved((_key(i - 3),), "redis"))
        self.send(ev)

    def wait(self) -> None:
        deadline = time.monotonic() + 10
        while self.pub.stats()["queued"] and time.monotonic() < deadline:
            time.sleep(0.01)


def _consumer(url: str, **kw) -> Consumer:
    kw.setdefault("heartbeat_s", 60.0)  # these hand-driven workers send no heartbeats
    return Consumer(redis.Redis.from_url(url), prefix="t:", block_ms=20, **kw)


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _seq(c: Consumer, worker: str) -> int:
    v = c.workers.get(worker)
    return -1 if v is None else v.seq


def _held(c: Consumer, worker: str) -> set[bytes]:
    v = c.workers.get(worker)
    return set() if v is None else set(v.tiers.get("redis", set()))


def test_a_restarted_consumer_replays_from_its_last_id_and_matches_one_that_never_stopped(redis_url):
    w = Worker(redis.Redis.from_url(redis_url), "w1")
    steady, restarted = _consumer(redis_url), _consumer(redis_url)
    steady.start()
    restarted.start()
    for i in range(200):
        w.store(i)
    w.wait()
    _until(lambda: _seq(restarted, "w1") == w.seq)
    restarted.stop()
    for i in range(200, 600):
        w.store(i)
    w.wait()
    restarted.start()
    _until(lambda: _seq(restarted, "w1") == w.seq and _seq(steady, "w1") == w.seq)
    assert _held(restarted, "w1") == _held(steady, "w1") == w.pub.view.tiers["redis"]
    assert restarted.replays == 1 and restarted.snapshots == 1  # the one at its start; no rebuild after
    steady.stop()
    restarted.stop()
    w.pub.close()


def test_a_consumer_whose_position_was_trimmed_away_rebuilds_from_the_snapshot(redis_url):
    w = Worker(redis.Redis.from_url(redis_url), "w2", maxlen=50, snapshot_every_s=0.2)
    c = _consumer(redis_url)
    c.start()
    w.store(0)
    w.wait()
    _until(lambda: _seq(c, "w2") == w.seq)
    c.stop()
    before = c.snapshots  # 1, or 0 when the worker's first snapshot came after this consumer's start
    for i in range(1, 2000):
        w.store(i)
    w.wait()
    first = redis.Redis.from_url(redis_url).xrange("t:{w2}:s", count=1)[0][1]
    assert int(first[b"q"]) > 10, "the stream was not trimmed past the consumer's position"
    time.sleep(0.5)  # a snapshot newer than the trim
    c.start()
    _until(lambda: _seq(c, "w2") == w.seq)
    assert c.snapshots >= before + 1 and c.gaps >= 1  # the restart found its position trimmed: a rebuild
    assert _held(c, "w2") == w.pub.view.tiers["redis"]
    c.stop()
    w.pub.close()


def test_a_worker_restart_clears_its_old_entries_at_every_consumer(redis_url):
    client = redis.Redis.from_url(redis_url)
    old = Worker(client, "w3", epoch="first")
    consumers = [_consumer(redis_url) for _ in range(3)]
    for c in consumers:
        c.start()
    for i in range(50):
        old.store(i)
    old.wait()
    _until(lambda: all(_held(c, "w3") == old.pub.view.tiers["redis"] for c in consumers))
    old.pub.close()
    new = Worker(client, "w3", epoch="second")
    new.store(1000)
    new.wait()
    _until(lambda: all(_held(c, "w3") == {_key(1000)} for c in consumers))
    assert all(c.workers["w3"].epoch == "second" and c.epochs == 1 for c in consumers)
    for c in consumers:
        c.stop()
    new.pub.close()


def test_a_silent_worker_is_forgotten_after_missed_heartbeats(redis_url):
    w = Worker(redis.Redis.from_url(redis_url), "w4")
    w.store(1)
    w.wait()
    c = _consumer(redis_url, heartbeat_s=0.1, missed=3)
    c.start()
    _until(lambda: _held(c, "w4") == {_key(1)})
    _until(lambda: "w4" not in c.workers, timeout=3)  # no heartbeat: gone after ~0.3 s
    # >= 1: the publisher's snapshot refreshes the registry, so a first snapshot that comes late
    # (a loaded machine) makes the worker known again, and silent again, before this line runs
    assert c.silent >= 1 and c.stats()["silent"] == c.silent
    c.stop()
    w.pub.close()


def test_dropped_batches_leave_a_gap_that_the_snapshot_heals(redis_url):
    w = Worker(redis.Redis.from_url(redis_url), "w5", buffer=5)
    c = _consumer(redis_url)
    c.start()
    for i in range(3000):  # far faster than the publisher drains 5 at a time: most are dropped
        w.store(i)
    assert w.pub.stats()["dropped"] > 0
    w.wait()
    w.send((Heartbeat(),))  # a drop at the very end shows as a gap at the next batch (a heartbeat at the latest)
    w.wait()
    _until(lambda: _seq(c, "w5") == w.seq)
    assert _held(c, "w5") == w.pub.view.tiers["redis"]
    c.stop()
    w.pub.close()
