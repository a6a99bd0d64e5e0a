"""RedisTier stats mutation testing found unchecked: each failed round trip counts one error, and
the URL that stats report carries no credentials."""

from __future__ import annotations

import time

import numpy as np

from ctxcache.tiers import BlockMeta, RedisTier
from tests.conftest import free_port

KEYS = [bytes([i]) * 16 for i in range(3)]
TOKENS = np.arange(4, dtype="<i4").tobytes()


def test_a_dead_server_counts_one_error_then_is_skipped(redis_factory):
    server = redis_factory()
    t = RedisTier(1 << 20, url=server.url, retry_interval=60)
    assert t.wait_ready()
    t.put(KEYS[0], b"v", BlockMeta(TOKENS))
    assert t.stats()["errors"] == 0
    server.kill()
    assert t.load_many(KEYS[:2], [TOKENS] * 2) == [None, None]
    assert not t.healthy and t.stats()["errors"] == 1
    assert t.load_many(KEYS[:2], [TOKENS] * 2) == [None, None]  # skipped: no second error
    assert t.stats()["errors"] == 1
    t.close()


def test_stats_show_where_the_server_is_but_not_the_password():
    port = free_port()  # nothing listens: stats need no server
    t = RedisTier(1 << 20, url=f"redis://user:s3cret@127.0.0.1:{port}/2", retry_interval=60)
    stats = t.stats()
    assert stats["url"] == f"redis://127.0.0.1:{port}"
    assert "s3cret" not in repr(stats) and "user" not in repr(stats)
    assert stats["errors"] == 0 and stats["reconnects"] == 0 and not stats["healthy"]
    t.close()


def test_a_saturated_bloom_filter_is_rebuilt_at_once(redis_url):
    # Sized for 10 keys (so for MIN_ITEMS), it soon holds more: its false "maybe"s (each a round
    # trip) grow with every key. It must not wait for the periodic refresh (5 minutes here) to be sized up.
    t = RedisTier(1 << 24, url=redis_url, prefix="sat:", bloom_items=10, bloom_refresh=300, retry_interval=0.05)
    assert t.wait_ready() and t.filter is not None
    keys = [i.to_bytes(2, "big") * 8 for i in range(t.filter.capacity + 20)]
    assert t.put_blobs([(k, t.codec.encode(b"v", k, TOKENS)) for k in keys]) == [True] * len(keys)
    deadline = time.monotonic() + 2
    while t.filter.saturated and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not t.filter.saturated and t.filter.count == len(keys)
    assert t.might_contain_many(keys) == [True] * len(keys)
    t.close()


def test_a_server_that_refuses_scan_is_not_asked_again_at_every_write(redis_factory):
    # A full filter is rebuilt at once, but only while scans work: where SCAN is refused (an ACL),
    # each write batch must not add a failing SCAN; the periodic refresh tries again.
    server = redis_factory()
    server.client().execute_command("ACL", "SETUSER", "noscan", "on", "nopass", "~*", "+@all", "-scan")
    url = f"redis://noscan@127.0.0.1:{server.port}/0"
    t = RedisTier(1 << 24, url=url, prefix="ns:", bloom_items=10, retry_interval=0.05)
    deadline = time.monotonic() + 2
    while t.errors == 0 and time.monotonic() < deadline:  # the first rebuild's SCAN is refused
        time.sleep(0.01)
    assert t.errors == 1 and t.healthy and t.filter is not None
    full = [i.to_bytes(2, "big") * 8 for i in range(t.filter.capacity)]
    assert t.put_blobs([(k, t.codec.encode(b"v", k, TOKENS)) for k in full]) == [True] * len(full)
    for i in range(len(full), len(full) + 20):  # each write now finds the filter saturated
        k = i.to_bytes(2, "big") * 8
        assert t.put_blobs([(k, t.codec.encode(b"v", k, TOKENS))]) == [True]
        time.sleep(0.01)
    assert t.filter is not None and t.filter.saturated
    time.sleep(0.2)
    assert t.errors == 1 and t.healthy
    t.close()
