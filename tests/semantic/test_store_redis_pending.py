"""Failed Redis deletes of the semantic store are kept and retried, never lost (store.py, pending.py).

The fault is real: the redis-server process is stopped (SIGSTOP) until one read times out, which
marks the tier unhealthy (it then sends nothing until it reconnects), and continued at once, so
its data is intact and a delete made meanwhile cannot have landed: the record survives, as it
does when a delete is lost in a network partition. An ACL that refuses DEL stands for a server
that answers but will not delete.
"""

from __future__ import annotations

import os
import signal

import pytest

from ctxcache.semantic import EntryStore, HashingEmbedder, SemanticCache, SemanticQuery

FR, JP, PE = "What is the capital of France?", "What is the capital of Japan?", "What is the capital of Peru?"


def q(text: str, tenant: str = "t1") -> SemanticQuery:
    return SemanticQuery(text=text, tenant=tenant, model="m")


def hang_once(server, store: EntryStore) -> None:
    """Make the tier unhealthy with the server's data intact (see the module docstring)."""
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        assert store.get(b"\0" * 16) is None  # times out
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert not store.tier.healthy


def open_cache(made, url: str, prefix: str, reconnect: float = 1.0, **kw) -> SemanticCache:
    kw.setdefault("timeout", 0.5)  # not the 50 ms default: a loaded machine must not time out by itself
    store = EntryStore.redis(url, prefix=prefix, retry_interval=reconnect, **kw)
    assert store.tier.wait_ready(5)
    c = SemanticCache(HashingEmbedder(), store, capacity=1 << 20)
    made.append(c)
    return c


def test_a_delete_while_redis_is_unreachable_lands_once_it_is_back(redis_factory, made):
    server = redis_factory()
    raw = server.client()
    c = open_cache(made, server.url, "p1:")
    e = c.store(q(FR), {"text": "Paris"})
    assert e is not None and raw.exists(b"p1:" + e.id)
    hang_once(server, c._store)
    assert c.erase(e.id) and c.get(e.id) is None
    assert raw.exists(b"p1:" + e.id)  # nothing could be sent: the record is still there
    assert c._store.tier.wait_ready(5)  # Redis is back
    c.store(q(JP), {"text": "Tokyo"})  # a later operation retries the delete
    assert not raw.exists(b"p1:" + e.id)
    s = c.stats()
    assert (s["pending_deletes"], s["failed_deletes"], s["retried_deletes"], s["dropped_deletes"]) == (0, 1, 1, 0)
    assert c.erased_verified(e.id)


def test_erasing_one_entry_is_unverified_while_its_delete_is_pending(redis_factory, made):
    server = redis_factory()
    c = open_cache(made, server.url, "p6:")
    e = c.store(q(FR), {"text": "Paris"})
    assert e is not None
    hang_once(server, c._store)
    assert c.erase(e.id) and not c.erased_verified(e.id)
    assert c._store.tier.wait_ready(5)
    assert c.erased_verified(e.id) and not server.client().exists(b"p6:" + e.id)


def test_pending_deletes_are_retried_at_close(redis_factory, made):
    server = redis_factory()
    raw = server.client()
    c = open_cache(made, server.url, "p4:")
    e = c.store(q(FR), {"text": "Paris"})
    assert e is not None
    hang_once(server, c._store)
    c.erase(e.id)
    assert c._store.tier.wait_ready(5)
    c.close()
    assert not raw.exists(b"p4:" + e.id)


@pytest.mark.parametrize("refused", [False, True], ids=["back-at-restart", "delete-still-refused"])
def test_an_erased_entry_is_not_served_after_a_restart(redis_factory, made, tmp_path, refused):
    server = redis_factory()
    raw = server.client()
    journal = tmp_path / "pending-deletes"
    c = open_cache(made, server.url, "p2:", reconnect=60, journal=journal)
    e = c.store(q(FR), {"text": "Paris"})
    c.store(q(PE), {"text": "Lima"})
    assert e is not None
    hang_once(server, c._store)
    c.erase(e.id)
    assert raw.exists(b"p2:" + e.id) and journal.exists()
    # The process dies here: no close, nothing more is tried. A new one starts on the same Redis.
    if refused:
        raw.execute_command("ACL", "SETUSER", "default", "-del")
    c2 = open_cache(made, server.url, "p2:", journal=journal)
    assert c2.lookup(q(FR)).hit is None and c2.get(e.id) is None
    assert c2.lookup(q(PE)).hit is not None  # the rest came back
    assert c2.stats()["pending_deletes"] == int(refused)
    assert raw.exists(b"p2:" + e.id) == int(refused)
    if refused:
        raw.execute_command("ACL", "SETUSER", "default", "+del")
        assert c2.erase_tenant("t1")["verified"] is True
        assert not raw.exists(b"p2:" + e.id) and not journal.exists()


def test_tenant_erasure_is_unverified_while_a_delete_is_pending(redis_factory, made):
    server = redis_factory()
    raw = server.client()
    c = open_cache(made, server.url, "p3:")
    a, b = c.store(q(FR), {"text": "Paris"}), c.store(q(JP), {"text": "Tokyo"})
    c.store(q(PE, tenant="t2"), {"text": "Lima"})
    assert a is not None and b is not None
    hang_once(server, c._store)
    out = c.erase_tenant("t1")
    assert out["verified"] is False and out["pending_deletes"] == 2 and out["erased"] == 2
    assert raw.exists(b"p3:" + a.id, b"p3:" + b.id) == 2
    assert c._store.tier.wait_ready(5)
    again = c.erase_tenant("t1")
    assert again == {"tenant": "t1", "erased": 0, "found_in_storage": 0, "pending_deletes": 0, "verified": True}
    assert raw.exists(b"p3:" + a.id, b"p3:" + b.id) == 0
    assert [x.tenant for x in c.entries()] == ["t2"]


def test_tenant_erasure_finds_records_another_process_wrote(redis_url, made):
    c = open_cache(made, redis_url, "p5:")
    other = open_cache(made, redis_url, "p5:")  # started with the first one: shares the prefix
    e = other.store(q(FR), {"text": "Paris"})
    other.store(q(PE, tenant="t2"), {"text": "Lima"})
    assert e is not None and c.get(e.id) is None
    out = c.erase_tenant("t1")
    assert out["verified"] is True and out["found_in_storage"] == 1 and out["erased"] == 1
    left = EntryStore.redis(redis_url, prefix="p5:")
    try:
        assert left.keys() == [bytes.fromhex(x.summary()["id"]) for x in other.entries("t2")]
    finally:
        left.close()
