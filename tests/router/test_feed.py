"""The KV events feeding the router's index (router/feed.py) through the real events consumer on a
real redis-server: stores answer prefix queries under the router's --worker URL, shared-store
blocks count for every worker on that store (by WorkerStarted.stores, not by tier name), a new
epoch forgets, a silent worker expires, an id /readyz reports maps late and is backfilled, the
history arm judges only workers no events cover."""

from __future__ import annotations

import time

import pytest
import redis

from ctxcache.events import BlockRemoved, BlockStored, EventBatch, TierCleared, WorkerStarted
from ctxcache.events.consumer import Consumer
from ctxcache.events.streams import StreamsPublisher
from ctxcache.router.feed import IndexFeed, WorkerMap
from ctxcache.router.index import BlockIndex
from ctxcache.router.pool import Pool
from ctxcache.router.proxy import Router
from ctxcache.router.requests import Keyed
from ctxcache.router.score import ScoreConfig, Scorer, Speculative

A, B, C = "http://127.0.0.1:8001", "http://127.0.0.1:8002", "http://127.0.0.1:8003"
STORE = "redis://127.0.0.1:6379/0#fleet:"
KEYS = [i.to_bytes(16, "little") for i in range(1, 11)]


def started(store: str = STORE) -> WorkerStarted:
    return WorkerStarted(("memory", "redis"), ("redis",), 32, (store,))


_PUBLISHERS: list[StreamsPublisher] = []


@pytest.fixture(autouse=True)
def _close_publishers():
    """A publisher left running outlives the session's redis-server and logs into later output."""
    yield
    while _PUBLISHERS:
        _PUBLISHERS.pop().close()


class Worker:
    def __init__(self, client, name: str, epoch: str = "e1") -> None:
        self.pub = StreamsPublisher(client, name, prefix="rf:")
        _PUBLISHERS.append(self.pub)
        self.name, self.epoch, self.seq = name, epoch, 0

    def send(self, *events) -> None:
        self.seq += 1
        self.pub.publish(EventBatch(self.name, self.epoch, self.seq, tuple(events), time.time()))
        deadline = time.monotonic() + 10
        while self.pub.stats()["queued"] and time.monotonic() < deadline:
            time.sleep(0.005)


class Fleet:
    def __init__(self, url: str, clock=time.monotonic) -> None:
        self.client = redis.Redis.from_url(url)
        self.client.flushdb()
        self.index = BlockIndex()
        self.map = WorkerMap([A, B, C])
        self.feed = IndexFeed(self.index, self.map)
        self.consumer = Consumer(redis.Redis.from_url(url), prefix="rf:", listeners=[self.feed], heartbeat_s=60.0,
                                 block_ms=10, clock=clock)  # fmt: skip

    def settle(self, cond, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.consumer._discover_at = 0.0  # look for new workers every round: no 1 s wait here
            self.consumer.poll()
            if cond():
                return
            assert time.monotonic() < deadline, f"timed out; {self.feed.stats()} {self.index.stats()}"

    def prefix(self, url: str, keys=KEYS):
        p = self.index.prefix(keys).workers.get(url)
        return None if p is None else (p.blocks, p.fast, p.slow, p.shared)


def test_stores_answer_under_the_worker_url_and_shared_blocks_count_for_the_stores_readers(redis_url):
    f = Fleet(redis_url)
    a, b, c = Worker(f.client, "host:8001"), Worker(f.client, "host:8002"), Worker(f.client, "host:8003")
    a.send(started(), BlockStored(tuple(KEYS[:4]), "memory"), BlockStored(tuple(KEYS[:6]), "redis"))
    b.send(started())  # stored nothing itself, but reads the same store
    c.send(started("redis://10.0.0.9:6379/0#fleet:"))  # another store: A's Redis blocks are not its
    f.settle(lambda: f.prefix(A) == (6, 4, 0, 2) and f.prefix(B) is not None and f.prefix(C) is not None)
    assert f.prefix(B) == (6, 0, 0, 6) and f.prefix(C) == (0, 0, 0, 0)
    assert f.feed.stats()["mapped"] == {"host:8001": A, "host:8002": B, "host:8003": C}
    a.send(BlockRemoved((KEYS[1],), "memory"))
    f.settle(lambda: f.prefix(A) == (6, 3, 0, 3))  # the run goes on through the store
    a.send(TierCleared("redis"))  # the store was flushed: nobody reads those blocks any more
    f.settle(lambda: f.prefix(B) == (0, 0, 0, 0))
    assert f.prefix(A) == (1, 1, 0, 0)


def test_a_new_epoch_forgets_and_a_silent_worker_expires(redis_url, clock):
    f = Fleet(redis_url, clock=clock)
    a, b = Worker(f.client, "host:8001"), Worker(f.client, "host:8002")
    a.send(started(), BlockStored(tuple(KEYS), "memory"))
    b.send(started(), BlockStored(tuple(KEYS[:3]), "memory"))
    f.settle(lambda: f.prefix(A) == (10, 10, 0, 0) and f.prefix(B) == (3, 3, 0, 0))
    a2 = Worker(f.client, "host:8001", epoch="e2")  # A restarted: its RAM is gone
    a2.send(started(), BlockStored(tuple(KEYS[:2]), "memory"))
    f.settle(lambda: f.prefix(A) == (2, 2, 0, 0))
    assert f.consumer.epochs == 1
    clock.advance(100)  # half the silence limit (60 s x 3): both still followed
    b.send()  # B's heartbeat
    f.settle(lambda: f.consumer.workers["host:8002"].seq == 2)
    clock.advance(100)  # A silent for 200 s, B for 100 s
    f.settle(lambda: f.prefix(A) is None)
    assert f.prefix(B) == (3, 3, 0, 0) and A not in f.index.workers


def test_an_id_reported_by_readyz_maps_late_and_is_backfilled(redis_url):
    f = Fleet(redis_url)
    w = Worker(f.client, "gpu-node-7")  # a custom [events] worker id: no port to match
    w.send(started(), BlockStored(tuple(KEYS[:5]), "memory"))
    f.settle(lambda: f.feed.stats()["unmapped"] == ["gpu-node-7"])
    assert f.index.workers == {}
    f.map.report(B, "gpu-node-7")  # B's /readyz said so (router/pool.py)
    f.settle(lambda: f.prefix(B) == (5, 5, 0, 0))
    assert f.feed.stats() == {"mapped": {"gpu-node-7": B}, "unmapped": []}
    w.send(BlockStored(tuple(KEYS[5:7]), "memory"))
    f.settle(lambda: f.prefix(B) == (7, 7, 0, 0))


def test_a_reported_id_wins_over_a_port_match():
    m = WorkerMap([A, B])
    assert m.resolve("host:8001") == A and m.resolve("host:9999") is None and m.resolve("no-port") is None
    m.report(B, "host:8001")  # B's worker says it publishes as host:8001 (behind a port mapping)
    assert m.resolve("host:8001") == B
    assert m.resolve("other:8002") is None  # B is claimed: its port no longer matches other ids


def test_the_history_arm_judges_only_the_workers_no_events_cover():
    index = BlockIndex()
    router = Router(Pool([A, B]), None, Scorer(ScoreConfig(block_size=32)), index, history=Speculative(ttl_s=600))
    keyed = Keyed(32 * len(KEYS) + 1, list(KEYS), "t", None)
    router.history.add(KEYS, A)  # the router once sent this prefix to A
    picked = router.route(keyed, set())
    assert picked is not None and picked[0].url == A and picked[1].predicted_cached_tokens == 320
    index.attach(A, "e1", started())  # A's events now reach the index: they say A no longer holds it
    index.attach(B, "e1", started())
    index.stored(B, "memory", KEYS[:3])
    picked = router.route(keyed, set())
    assert picked is not None and picked[0].url == B and picked[1].predicted_cached_tokens == 96
