"""Erasures reach the other processes on the same Redis prefix through tombstones (tombstones.py).

Two or three SemanticCache instances on one redis-server stand for replicas. An ACL that refuses
DEL (``-del``) keeps the erased record in Redis, as a lost delete would: a replica that holds the
entry must stop serving it within its sync period, and one that starts meanwhile must not load
it, though the erasing process's pending-delete journal is local to it.
"""

from __future__ import annotations

import time
import tomllib

import pytest

from ctxcache.errors import ConfigError
from ctxcache.semantic import EntryStore, HashingEmbedder, SemanticCache
from ctxcache.tiers import RedisTier

from .test_store_redis_pending import FR, JP, hang_once, q

SYNC = 0.2


def replica(made, url: str, prefix: str, *, sync: float = SYNC, reconnect: float = 1.0, **kw) -> SemanticCache:
    store = EntryStore.redis(url, prefix=prefix, retry_interval=reconnect, timeout=0.5, sync_interval=sync, **kw)
    assert store.tier.wait_ready(5) and store.tombs is not None
    if "tombstone_linger" in kw:
        store.tombs.skew = 0.0  # one host: no clock skew, so a linger of a second can be tested
    c = SemanticCache(HashingEmbedder(), store, capacity=1 << 20)
    made.append(c)
    return c


def served(c: SemanticCache, text: str) -> bool:
    return c.lookup(q(text)).hit is not None


def test_a_replica_stops_serving_an_erased_entry_and_a_new_one_never_loads_it(redis_factory, made):
    server = redis_factory()
    raw = server.client()
    a = replica(made, server.url, "t1:")
    e = a.store(q(FR), {"text": "Paris"})
    a.store(q(JP), {"text": "Tokyo"})
    assert e is not None
    b = replica(made, server.url, "t1:")
    assert served(b, FR) and served(b, JP)  # b loaded both at start-up
    raw.execute_command("ACL", "SETUSER", "default", "-del")
    assert a.erase(e.id) and not a.erased_verified(e.id)
    assert raw.exists(b"t1:" + e.id)  # the delete was refused: the record survives
    time.sleep(SYNC * 1.5)
    assert not served(b, FR) and b.get(e.id) is None and served(b, JP)
    assert b.stats()["erased_elsewhere"] == 1
    c = replica(made, server.url, "t1:")  # a and b's journals are theirs: c learns from Redis
    assert c.get(e.id) is None and not served(c, FR) and served(c, JP)
    raw.execute_command("ACL", "SETUSER", "default", "+del")
    assert a.erased_verified(e.id) and not raw.exists(b"t1:" + e.id)
    until = raw.zscore(b"ctxtomb@t1:", e.id)  # the delete landed on the retry: days -> the 10-minute linger
    assert until is not None and time.time() + 590 < until < time.time() + 601


def test_a_delete_requested_while_redis_is_unreachable_writes_its_tombstone_on_the_retry(redis_factory, made):
    server = redis_factory()
    raw = server.client()
    a = replica(made, server.url, "t2:")
    e = a.store(q(FR), {"text": "Paris"})
    assert e is not None
    b = replica(made, server.url, "t2:", reconnect=30)
    hang_once(server, a._store)  # a cannot reach Redis; b's connection is intact
    a.erase(e.id)
    assert raw.zcard(b"ctxtomb@t2:") == 0  # nothing could be written
    time.sleep(SYNC * 1.5)
    assert served(b, FR)  # no tombstone yet: b cannot know
    raw.execute_command("ACL", "SETUSER", "default", "-del")
    assert a._store.tier.wait_ready(5)
    assert not a.erased_verified(e.id)  # the retry: tombstone written, DEL refused
    assert raw.zscore(b"ctxtomb@t2:", e.id) is not None and raw.exists(b"t2:" + e.id)
    time.sleep(SYNC * 1.5)
    assert not served(b, FR)


def test_the_tombstone_lingers_after_the_delete_is_confirmed_then_goes(redis_factory, made):
    server = redis_factory()
    raw = server.client()
    a = replica(made, server.url, "t3:", tombstone_linger=1.0)
    e = a.store(q(FR), {"text": "Paris"})
    assert e is not None
    b = replica(made, server.url, "t3:", tombstone_linger=1.0)
    assert a.erase(e.id) and a.erased_verified(e.id)  # the delete landed at once
    assert raw.zscore(b"ctxtomb@t3:", e.id) is not None  # b still holds the entry: it must learn of it
    time.sleep(SYNC * 1.5)
    assert not served(b, FR)
    time.sleep(1.0)
    b.sweep()  # a sync prunes what expired
    assert raw.zcard(b"ctxtomb@t3:") == 0 and not raw.exists(b"ctxtomb@t3:")


def test_an_entry_stored_again_after_its_erasure_is_served_everywhere(redis_factory, made):
    server = redis_factory()
    raw = server.client()
    a = replica(made, server.url, "t4:")
    b = replica(made, server.url, "t4:")
    e = a.store(q(FR), {"text": "Paris"})
    assert e is not None and a.erase(e.id)
    time.sleep(SYNC * 1.5)
    assert not served(b, FR)
    b.store(q(FR), {"text": "Paris, again"})  # the old erase no longer applies
    assert raw.zscore(b"ctxtomb@t4:", e.id) is None
    time.sleep(SYNC * 1.5)
    assert served(b, FR)
    c = replica(made, server.url, "t4:")
    assert (hit := c.lookup(q(FR)).hit) is not None and hit.response == {"text": "Paris, again"}


def test_a_replica_that_missed_a_tombstone_checks_what_it_holds(redis_factory, made):
    server = redis_factory()
    a = replica(made, server.url, "t5:", tombstone_linger=0.5)
    e = a.store(q(FR), {"text": "Paris"})
    a.store(q(JP), {"text": "Tokyo"})
    assert e is not None
    b = replica(made, server.url, "t5:", tombstone_linger=0.5, reconnect=2.5)
    hang_once(server, b._store)  # b cannot read tombstones until it reconnects
    assert a._store.tier.wait_ready(5) and a.erase(e.id) and a.erased_verified(e.id)
    time.sleep(0.8)
    a.sweep()  # the tombstone expired and is pruned before b could see it
    assert not server.client().exists(b"ctxtomb@t5:")
    assert b._store.tier.wait_ready(5)
    time.sleep(SYNC * 1.5)
    assert not served(b, FR) and served(b, JP)


@pytest.mark.parametrize("skew", [-60.0, 60.0])
def test_a_replica_drops_an_erased_entry_whatever_the_hosts_clock_skew(redis_factory, made, skew):
    """The eraser's wall clock 60 s behind or ahead of the replica's: tombstones are timed and read
    by the Redis server's clock, so the replica still drops the entry within its sync period."""
    server = redis_factory()
    a = replica(made, server.url, "t9:")
    e = a.store(q(FR), {"text": "Paris"})
    assert e is not None
    b = replica(made, server.url, "t9:")
    assert served(b, FR)
    # The hosts' wall clocks, where the stores read them (``wall``) before they used the server's.
    a._store.tombs.clock = lambda: time.time() + skew
    b._store.tombs.clock = time.time
    time.sleep(SYNC * 1.5)
    assert served(b, FR)  # b has synced since it started: its next read starts where this one ended
    assert a.erase(e.id) and a.erased_verified(e.id)  # confirmed: only the 10-minute linger is left
    time.sleep(SYNC * 1.5)
    assert not served(b, FR) and b.stats()["erased_elsewhere"] == 1


def test_hits_between_syncs_cost_no_round_trip(redis_factory, made):
    server = redis_factory()
    now = [0.0]
    tier = RedisTier(1 << 40, "fifo", url=server.url, prefix="t6:", name="semantic", timeout=0.5)
    store = EntryStore(tier, sync_interval=2.0, clock=lambda: now[0])
    assert tier.wait_ready(5)
    a = SemanticCache(HashingEmbedder(), store, capacity=1 << 20)
    made.append(a)
    a.store(q(FR), {"text": "Paris"})
    before, syncs = tier.round_trips, store.syncs
    for _ in range(200):
        assert served(a, FR)
    assert tier.round_trips == before and store.syncs == syncs  # hits within a sync period: no round trip
    now[0] += 2.0
    assert served(a, FR) and served(a, FR)
    assert tier.round_trips == before + 1 and store.syncs == syncs + 1  # one sync per period: one round trip


def test_a_sync_reads_only_the_tombstones_written_since_the_last_one(redis_factory, made):
    server = redis_factory()
    a = replica(made, server.url, "t7:")
    texts = [f"What is the capital of country number {i}?" for i in range(40)]
    ids = [e.id for t in texts if (e := a.store(q(t), {"text": t})) is not None]
    b = replica(made, server.url, "t7:")
    assert b._store.tombs is not None
    b._store.tombs.skew = 0.1  # a tombstone is read again for ``skew`` seconds after it was written
    assert b.stats()["entries"] == 40
    for eid in ids:
        assert a.erase(eid) and a.erased_verified(eid)  # confirmed: the tombstones linger 10 minutes
    time.sleep(SYNC * 1.5)
    b.sweep()
    assert b.stats()["entries"] == 0 and b.stats()["erased_elsewhere"] == 40
    time.sleep(SYNC * 1.5)
    b.sweep()  # this sync may still read those written within ``skew`` of the last one
    read = b.stats()["tombstones_read"]
    assert 40 <= read <= 80
    for _ in range(3):
        time.sleep(SYNC * 1.5)
        b.sweep()
    assert b.stats()["tombstones_read"] == read  # three more syncs: nothing new, nothing read
    assert server.client().zcard(b"ctxtomb@t7:") == 40


def test_a_tenant_erasure_tombstones_its_entries_in_batches_and_every_replica_drops_them(redis_factory, made):
    server = redis_factory()
    a = replica(made, server.url, "t8:")
    for i in range(40):
        a.store(q(f"What is the capital of country number {i}?"), {"n": i})
    a.store(q(FR, tenant="t2"), {"text": "Paris"})
    b = replica(made, server.url, "t8:")
    trips = a._store.tier.round_trips
    out = a.erase_tenant("t1")
    assert out["verified"] is True and out["erased"] == 40
    assert a._store.tier.round_trips - trips <= 8  # tombstones, DEL and linger: one round trip each for 40
    assert server.client().zcard(b"ctxtomb@t8:") == 40
    time.sleep(SYNC * 1.5)
    b.sweep()
    assert b.stats()["entries"] == 1 and b.stats()["erased_elsewhere"] == 40
    assert b.lookup(q(FR, tenant="t2")).hit is not None


def test_tombstones_on_a_redis_cluster(redis_cluster, made):
    url = redis_cluster[0].url.rsplit("/", 1)[0]
    a = replica(made, url, "tc:", cluster=True)
    ids = [e.id for i in range(12) if (e := a.store(q(f"What is the capital of country number {i}?"), {"n": i}))]
    b = replica(made, url, "tc:", cluster=True)
    assert b.stats()["entries"] == 12  # records spread over the masters, listed from each
    assert a.erase_tenant("t1")["verified"] is True
    time.sleep(SYNC * 1.5)
    b.sweep()
    assert b.stats()["entries"] == 0 and b.stats()["erased_elsewhere"] == 12
    assert all(b.get(eid) is None for eid in ids) and b.stats()["tombstone_errors"] == 0


@pytest.mark.parametrize("bad", ["2s", 0, -1.0, True, None])
def test_a_bad_sync_interval_is_a_config_error(redis_factory, bad):
    server = redis_factory()
    with pytest.raises(ConfigError, match="sync_interval"):
        EntryStore.from_config({"kind": "redis", "url": server.url, "sync_interval": bad})


@pytest.mark.parametrize("bad", ["10m", True, 1.0, 0])
def test_tombstone_linger_from_the_config_file(redis_factory, bad):
    server = redis_factory()
    store = EntryStore.from_config({"kind": "redis", "url": server.url, "tombstone_linger": 30})
    try:
        assert store.tombs is not None and store.tombs.linger == 30.0
    finally:
        store.close()
    with pytest.raises(ConfigError, match="tombstone_linger"):  # a string; not above the 2 s sync_interval
        EntryStore.from_config({"kind": "redis", "url": server.url, "tombstone_linger": bad})


def test_the_documented_redis_store_table_builds_with_those_settings(redis_factory):
    from pathlib import Path

    from ctxcache.server.routes_semantic import _store_spec

    text = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()
    block = text.split("## Configuration (`--config", 1)[1].split("```toml", 1)[1].split("```", 1)[0]
    spec = tomllib.loads(block)["semantic"]
    spec["store"]["url"] = redis_factory().url
    store = EntryStore.from_config(_store_spec(spec, "m"))
    try:
        assert store.sync_interval == 2.0 and store.tombs is not None and store.tombs.linger == 600.0
        assert store.pending.limit == 100_000 and store.pending.journal is None  # journal = false
    finally:
        store.close()
