"""Events a real ContextCache emits (memory over a real redis-server): a store is one BlockStored
per tier (the Redis one only once the write landed), evictions, erasure and expiry carry their
reason, token ids only when opted in; two tenants with the same prompt share no key (0 of N)."""

from __future__ import annotations

import time

import redis

from ctxcache.cache import ContextCache
from ctxcache.events import BlockRemoved, BlockStored, ListSink
from ctxcache.events.codec import decode_events
from ctxcache.events.runtime import start_events

BS = 4


class Collect(ListSink):
    """Every batch kept (the seam ZmqPublisher and StreamsPublisher implement)."""

    def events(self, kind):
        return [e for b in self.batches for e in b.events if isinstance(e, kind)]


def _cache(url: str, ram: str = "1MiB", **extra) -> ContextCache:
    tiers = [{"kind": "memory", "capacity": ram}, {"kind": "redis", "capacity": "64MiB", "url": url, "prefix": "ee:"}]
    return ContextCache.from_config({"block_size": BS, "tiers": tiers, **extra})


def _run(cache: ContextCache, **cfg):
    rt = start_events(cache, {"worker": "eng", "consume": False, "prefix": "ee:ev:", **cfg})
    sink = Collect()
    rt.emitter.sinks.append(sink)
    return rt, sink


def _payloads(n: int, tag: int = 0) -> list[bytes]:
    return [bytes([tag, i]) * 64 for i in range(n)]


def test_a_store_is_announced_per_tier_the_redis_one_once_it_landed(redis_url):
    cache = _cache(redis_url)
    rt, sink = _run(cache)
    toks = list(range(100, 140))
    cache.store(toks, _payloads(10))
    cache.flush()
    time.sleep(0.1)
    rt.close()
    stored = sink.events(BlockStored)
    keys = cache.hasher.keys(toks, cache.namespace())
    by_tier = {t: [k for e in stored if e.tier == t for k in e.keys] for t in ("memory", "redis")}
    assert sorted(by_tier["memory"]) == sorted(keys) and sorted(by_tier["redis"]) == sorted(keys)
    ram = [e for e in stored if e.tier == "memory"]
    assert len(ram) == 1 and ram[0].keys == tuple(keys) and ram[0].parent is None  # one chain, in order
    assert all(e.token_ids is None for e in stored)  # by default no tokens leave the worker
    client = redis.Redis.from_url(redis_url)
    assert all(client.exists(b"ee:" + k) for k in by_tier["redis"])
    entries = client.xrange("ee:ev:{eng}:s")
    assert [int(f[b"q"]) for _, f in entries] == list(range(1, len(entries) + 1))  # seq from 1, no gaps
    assert sum(len(decode_events(f[b"v"])) for _, f in entries) == rt.publisher.stats()["published"]
    cache.close()


def test_eviction_erasure_and_token_ids_opt_in(redis_url):
    cache = _cache(redis_url, ram="4KiB")
    rt, sink = _run(cache, token_ids=True)
    for j in range(6):
        cache.store(list(range(1000 * j, 1000 * j + 40)), _payloads(10, j))
    cache.flush()
    time.sleep(0.1)
    removed = sink.events(BlockRemoved)
    assert any(e.tier == "memory" and e.reason in ("evicted", "demoted") for e in removed)
    stored = [e for e in sink.events(BlockStored) if e.tier == "memory"]
    assert stored and all(e.token_ids is not None and len(e.token_ids) == BS * len(e.keys) for e in stored)
    assert stored[0].token_ids[:4] == (0, 1, 2, 3)
    cache.erase_tenant("default")
    time.sleep(0.1)
    rt.close()
    erased = [e for e in sink.events(BlockRemoved) if e.reason == "erased"]
    assert {e.tier for e in erased} >= {"redis"}
    cache.close()


def test_two_tenants_with_the_same_prompt_share_no_event_key(redis_url):
    tenancy = {"tenants": {"a": {"api_keys": ["ka-0123456789"]}, "b": {"api_keys": ["kb-0123456789"]}},
               "tenancy": {"secret": "fleet-secret-0123456789"}}  # fmt: skip
    cache = _cache(redis_url, ram="64MiB", **tenancy)
    rt, sink = _run(cache)
    n = 50
    prompts = [list(range(7 * i, 7 * i + 4 * BS)) for i in range(n)]
    for p in prompts:
        cache.store(p, _payloads(4), namespace="a")
    cache.flush()
    time.sleep(0.1)
    rt.close()
    seen = {k for e in sink.events(BlockStored) for k in e.keys} | {e.parent for e in sink.events(BlockStored)}
    mine = {k for p in prompts for k in cache.hasher.keys(p, cache.namespace("a"))}
    assert mine <= seen  # the events do name tenant a's blocks
    matches = sum(any(k in seen for k in cache.hasher.keys(p, cache.namespace("b"))) for p in prompts)
    assert matches == 0, f"{matches} of {n} of tenant b's requests match tenant a's events"
    raw = b"".join(f[b"v"] for _, f in redis.Redis.from_url(redis_url).xrange("ee:ev:{eng}:s"))
    assert b"fleet-secret" not in raw and b"ka-0123" not in raw  # no secret, no api key on the wire
    cache.close()
