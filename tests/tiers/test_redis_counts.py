"""RedisTier's counters add up over a tier's life (errors, reconnects, corrupt reads), deletes on a
dead server count nothing, and stats say whether the tier talks to a Cluster."""

from __future__ import annotations

import numpy as np

from ctxcache.tiers import BlockMeta, RedisTier
from tests.conftest import free_port

KEYS = [bytes([i]) * 16 for i in range(3)]
TOKENS = np.arange(4, dtype="<i4").tobytes()


def test_errors_and_reconnects_add_up_over_two_outages(redis_factory):
    server = redis_factory()
    t = RedisTier(1 << 20, url=server.url, retry_interval=0.05)
    assert t.wait_ready(5) and t.reconnects == 0
    for outage in (1, 2):
        server.kill()
        assert t.load_many(KEYS[:1], [TOKENS]) == [None]  # the round trip that finds it dead
        assert not t.healthy and t.errors == outage
        server = redis_factory(server.port)
        assert t.wait_ready(5) and t.reconnects == outage
    assert t.stats()["errors"] == 2 and t.stats()["reconnects"] == 2
    t.close()


def test_every_corrupt_read_is_counted(redis_factory):
    server = redis_factory()
    t = RedisTier(1 << 20, url=server.url, prefix="cc:", retry_interval=60)
    assert t.wait_ready(5)
    raw = server.client()
    for k in KEYS[:2]:
        raw.set(b"cc:" + k, b"not a block")
    assert [t.get_blob(k) for k in KEYS[:2]] == [None, None]
    assert t.corrupt == 2
    t.close()


def test_deleting_nothing_or_on_a_dead_server_deletes_nothing(redis_factory):
    server = redis_factory()
    t = RedisTier(1 << 20, url=server.url, retry_interval=60)
    assert t.wait_ready(5)
    t.put(KEYS[0], b"v", BlockMeta(TOKENS))
    assert t.delete_many([]) == 0
    server.kill()
    assert t.delete_many(KEYS[:1]) == 0  # the round trip fails: nothing known to be deleted
    assert not t.healthy and t.delete_many(KEYS[:1]) == 0  # skipped while down
    t.close()


def test_stats_say_whether_the_tier_is_a_cluster_client():
    port = free_port()  # nothing listens: stats need no server
    t = RedisTier(1 << 20, url=f"redis://127.0.0.1:{port}/0", retry_interval=60)
    assert t.stats()["cluster"] is False
    t.close()
