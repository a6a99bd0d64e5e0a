"""The semantic cache on a Redis store that dies: erasing an entry still forgets it and never raises
out of the cache, though a RedisTier delete that cannot land raises; the store keeps that delete
for a retry (test_store_redis_pending.py)."""

from __future__ import annotations

from ctxcache.semantic import EntryStore, HashingEmbedder, SemanticCache, SemanticQuery


def test_erasing_while_redis_is_down_forgets_the_entry_without_raising(redis_factory):
    server = redis_factory()
    store = EntryStore.redis(server.url, prefix="sd:", retry_interval=60)
    assert store.tier.wait_ready(5)
    c = SemanticCache(HashingEmbedder(), store, capacity=1 << 20)
    try:
        e = c.store(SemanticQuery(text="What is the capital of France?", tenant="t1", model="m"), {"text": "Paris"})
        assert e is not None
        server.kill()
        assert c.erase(e.id)  # before EntryStore caught it: TierUnavailableError out of erase()
        assert c.get(e.id) is None and c.stats()["entries"] == 0
        assert store.delete(e.id) is False and store.stats()["pending_deletes"] == 1
    finally:
        c.close()
