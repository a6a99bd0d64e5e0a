"""RedisTier's counters add up over a tier's life (errors, reconnects, corrupt reads), deletes on a
dead server raise, and stats say whether the tier talks to a Cluster."""

from __future__ import annotations

import numpy as np
import pytest

from ctxcache.errors import DeleteFailedError, TierUnavailableError
from ctxcache.tiers import BlockMeta, RedisTier
from tests.conftest import free_port

KEYS = [bytes([i]) * 16 for i in range(3)]
TOKENS = np.arange(4, dtype="<i4").tobytes()


def test_errors_and_reconnects_add_up_over_two_outages(redis_factory):
    server = redis_factory()
    # No Bloom filter: its rebuild after a reconnect is a background SCAN, which the next kill
    # can meet, counting a second error for one outage (seen 2 times in 105 runs).
    t = RedisTier(1 << 20, url=server.url, retry_interval=0.05, bloom=False)
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


def test_a_delete_on_a_dead_server_raises_and_a_missing_key_does_not(redis_factory):
    """A delete that may not have landed raises (the mover then keeps the block charged and
    counts it); a key that is already gone is a successful delete of nothing."""
    server = redis_factory()
    t = RedisTier(1 << 20, url=server.url, retry_interval=60)
    assert t.wait_ready(5)
    t.put(KEYS[0], b"v", BlockMeta(TOKENS))
    assert t.delete_many([]) == 0 and t.delete_many(KEYS[1:3]) == 0 and t.delete(KEYS[1]) is False
    server.kill()
    with pytest.raises(DeleteFailedError, match="unreachable") as err:
        t.delete_many(KEYS[:1])  # the round trip fails (before: 0, as if the key had been missing)
    assert err.value.failed == (KEYS[0],) and err.value.deleted == 0
    assert not t.healthy and KEYS[0] in t  # may still be stored: still charged, the caller retries it
    with pytest.raises(TierUnavailableError):
        t.delete(KEYS[0])  # skipped while down
    assert KEYS[0] in t
    assert t.delete_many([]) == 0  # nothing to send: nothing failed
    t.close()


def test_a_delete_the_server_refuses_raises(redis_factory):
    """A refused command (here an ACL without DEL) leaves the key stored: a failed delete too."""
    server = redis_factory()
    server.client().execute_command("ACL", "SETUSER", "nodel", "on", ">pw", "~*", "+@all", "-del")
    t = RedisTier(1 << 20, url=f"redis://nodel:pw@127.0.0.1:{server.port}/0", prefix="p:", retry_interval=60)
    assert t.wait_ready(5)
    t.put(KEYS[0], b"v", BlockMeta(TOKENS))
    with pytest.raises(TierUnavailableError, match="refused"):
        t.delete_many(KEYS[:2])  # before: 0, and the key stayed stored
    assert t.healthy and server.client().exists(b"p:" + KEYS[0])
    t.close()


def test_stats_say_whether_the_tier_is_a_cluster_client():
    port = free_port()  # nothing listens: stats need no server
    t = RedisTier(1 << 20, url=f"redis://127.0.0.1:{port}/0", retry_interval=60)
    assert t.stats()["cluster"] is False
    t.close()
