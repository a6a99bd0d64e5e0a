"""RedisTier against real redis-server processes: pipelining, TTL, Bloom filter, health, Cluster."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from ctxcache.errors import ConfigError, TierUnavailableError
from ctxcache.tiers import BlockMeta, RedisTier
from tests.conftest import wait_cluster_ok

KEYS = [bytes([i]) * 16 for i in range(40)]
TOK = np.arange(4, dtype="<i4").tobytes()


def tier(url: str, **kw) -> RedisTier:
    t = RedisTier(1 << 24, url=url, retry_interval=0.05, **kw)
    assert t.wait_ready()
    return t


def test_batch_put_get_ttl_and_token_check(redis_url, redis_server):
    t = tier(redis_url, ttl="1h", prefix="t1:")
    blobs = [(k, t.codec.encode([np.full(8, i, np.float32)], k, TOK)) for i, k in enumerate(KEYS)]
    assert t.put_blobs(blobs) == [True] * len(KEYS)
    assert len(t) == 40 and t.used_bytes == sum(len(b) for _, b in blobs)
    got = t.load_many(KEYS + [b"?" * 16], [TOK] * 41)
    assert all(int(g.payload[0][0]) == i for i, g in enumerate(got[:40])) and got[40] is None
    assert t.load_many(KEYS[:1], [b"other tokens"]) == [None]  # stored tokens must match
    ttl = redis_server.client().pttl(b"t1:" + KEYS[0])
    assert 3_500_000 < ttl <= 3_600_000
    assert t.delete_many(KEYS[:10]) == 10 and len(t) == 30
    t.put(KEYS[0], b"payload", BlockMeta(TOK))
    assert t.get(KEYS[0]) == b"payload"
    t.close()


def test_bloom_filter_is_built_from_the_shared_store_and_skips_misses(redis_url):
    writer = tier(redis_url)
    writer.put_blobs([(k, writer.codec.encode(b"x", k)) for k in KEYS])
    reader = tier(redis_url)  # another process's view: knows nothing, scans at connect
    assert len(reader) == 0 and reader.filter is not None and reader.filter.count == 40
    assert reader.might_contain_many(KEYS[:3]) == [True] * 3
    absent = [i.to_bytes(2, "little") * 8 for i in range(1000, 2000)]
    maybe = reader.might_contain_many(absent)
    assert sum(maybe) < 50 and reader.filter.skipped == len(absent) - sum(maybe)
    block = reader.load_many(KEYS[:1], [None])[0]
    reader.adopt(KEYS[0], block.nbytes)
    assert len(reader) == 1 and reader.used_bytes == block.nbytes
    writer.close()
    reader.close()


def test_a_corrupt_value_is_a_counted_miss_and_deleted(redis_url, redis_server):
    t = tier(redis_url, prefix="c:")
    t.put(KEYS[0], b"good payload", BlockMeta(TOK))
    raw = redis_server.client()
    value = bytearray(raw.get(b"c:" + KEYS[0]))
    value[-3] ^= 0x10
    raw.set(b"c:" + KEYS[0], bytes(value))
    assert t.load_many([KEYS[0]], [TOK]) == [None]
    assert t.corrupt == 1 and raw.exists(b"c:" + KEYS[0]) == 0 and KEYS[0] not in t
    t.close()


def test_down_at_start_degrades_then_recovers(redis_factory, tmp_path):
    from tests.conftest import free_port

    port = free_port()
    t = RedisTier(1 << 20, url=f"redis://127.0.0.1:{port}/0", retry_interval=0.05)
    assert not t.healthy
    t0 = time.monotonic()
    assert t.load_many(KEYS[:3], [None] * 3) == [None] * 3
    assert t.might_contain_many(KEYS[:3]) == [False] * 3
    assert t.put_blobs([(KEYS[0], b"x")]) == [False]
    with pytest.raises(TierUnavailableError):
        t.put_blob(KEYS[0], b"x")
    assert time.monotonic() - t0 < 0.05  # an unhealthy tier answers without network calls
    redis_factory(port)
    assert t.wait_ready(5) and t.reconnects == 1
    assert t.put_blobs([(KEYS[0], t.codec.encode(b"v", KEYS[0]))]) == [True]
    t.close()


def test_a_hung_server_costs_one_timeout_then_the_tier_is_skipped(redis_factory):
    server = redis_factory()
    t = tier(server.url, timeout="50ms")
    t.put(KEYS[0], b"v", BlockMeta(TOK))
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        assert t.load_many([KEYS[0]], [TOK]) == [None]
        assert time.monotonic() - t0 < 0.5 and not t.healthy
        t0 = time.monotonic()
        assert t.get(KEYS[0]) is None and time.monotonic() - t0 < 0.01
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert t.wait_ready(5) and t.get(KEYS[0]) == b"v"
    t.close()


def test_redis_cluster_spreads_blocks_and_survives_a_hung_master(redis_cluster):
    url = redis_cluster[0].url.rsplit("/", 1)[0]
    t = tier(url, cluster=True, prefix="cl:")
    blobs = [(k, t.codec.encode([np.full(4, i, np.int16)], k, TOK)) for i, k in enumerate(KEYS)]
    assert t.put_blobs(blobs) == [True] * 40
    sizes = [n.client().dbsize() for n in redis_cluster]
    assert sum(sizes) >= 40 and min(sizes) > 0  # every master holds some
    got = t.load_many(KEYS, [TOK] * 40)
    assert [int(g.payload[0][0]) for g in got] == list(range(40))
    other = tier(url, cluster=True, prefix="cl:")  # Bloom filter rebuilt by scanning every master
    assert other.filter is not None and other.filter.count == 40
    victim = redis_cluster[1].proc
    on_hung = {name[3:] for name in redis_cluster[1].client().keys(b"cl:*")}
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        got = t.load_many(KEYS, [TOK] * 40)  # only the hung master's keys miss (before: all 40)
        assert [k for k, g in zip(KEYS, got) if g is None] == [k for k in KEYS if k in on_hung]
        assert time.monotonic() - t0 < 0.5 and t.healthy
        assert t.masters_down == [f"127.0.0.1:{redis_cluster[1].port}"]
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    wait_cluster_ok(redis_cluster)
    assert t.wait_ready(5)
    assert all(g is not None for g in t.load_many(KEYS, [TOK] * 40))
    t.close()
    other.close()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"url": "http://x"}, "url must look like"),
        ({"timeout": "soon"}, "cannot parse timeout"),
        ({"ttl": -1}, "ttl must be positive"),
        ({"bloom_fpr": 2.0}, "fpr"),
        ({"codec": "fp4"}, "unknown codec mode"),
    ],
)
def test_bad_redis_options(kw, match):
    with pytest.raises(ConfigError, match=match):
        RedisTier(1 << 20, **kw)


def test_missing_redis_py_is_a_clear_error(monkeypatch):
    import ctxcache.tiers.redis as mod
    from ctxcache.errors import MissingDependencyError

    monkeypatch.setattr(mod, "_redis", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'ctxcache\[redis\]'"):
        RedisTier(1 << 20)
