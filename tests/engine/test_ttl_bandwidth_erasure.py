"""TTLs refreshed on hit and swept, token buckets on slow-tier loads, verified erasure."""

from __future__ import annotations

import pytest

from ctxcache.engine.expiry import Expiry
from ctxcache.tiers import DiskTier

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of


def test_ttl_is_refreshed_on_hit_and_expired_is_a_miss(tmp_path, clock):
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {"ttl": "10s"}, "b": {}}, clock=clock)
    p, q = prompt_of(1), prompt_of(2)
    ask(cache, "a", p)
    ask(cache, "b", q)  # no TTL: never expires
    clock.advance(8)
    assert ask(cache, "a", p) == len(p)  # a hit at t=8 refreshes the deadline to t=18
    clock.advance(9)
    assert ask(cache, "a", p) == len(p)  # t=17: alive only because of the refresh
    clock.advance(10.5)
    assert cache.lookup(cache.prompt(p, "a")).hit_tokens == 0  # t=27.5: expired
    assert cache.sweep() == 4 and cache.stats()["expired"] == 4
    assert cache.tenant_usage("a")["blocks"] == 0 and cache.slots[0].tenant_used("a") == 0
    clock.advance(1000)
    assert cache.sweep() == 0 and ask(cache, "b", q) == len(q)


def test_the_sweeper_pops_only_what_expired():
    """O(expired log n): due() pops expired entries and stops at the first live one."""
    e = Expiry()
    for i in range(1000):
        e.set(i, float(i))
    for i in range(0, 1000, 2):
        e.set(i, 5000.0)  # refreshed: its old entry is stale and skipped
    assert e.due(9.5) == [1, 3, 5, 7, 9]
    assert len(e._heap) <= 2 * len(e) + 64  # stale entries are compacted away


def _on_disk(tmp_path, opts, clock, sleep=None):
    ram = tier_of("memory", tmp_path, capacity=1 << 20)
    disk = tier_of("disk", tmp_path)
    cache = cache_with([ram, disk], {"a": {"rate": 1000, "burst": 1000}}, clock=clock, sleep=sleep, **opts)
    p = prompt_of(1, n_blocks=8)
    ask(cache, "a", p)
    return cache, p


def _demote(cache):
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())
    cache.flush()


def test_an_empty_bucket_falls_back_to_recompute_and_counts_it(tmp_path, clock):
    cache, p = _on_disk(tmp_path, {"on_throttle": "recompute"}, clock)
    _demote(cache)
    assert ask(cache, "a", p) == len(p)  # a full bucket lets one large load through, then is empty
    _demote(cache)
    assert ask(cache, "a", p) == 0  # empty: recompute instead of loading
    assert cache.stats()["throttled_recomputes"] == 1 and cache.stats()["lost"] == 0
    clock.advance(60)  # refilled: the blocks were never lost
    assert ask(cache, "a", p) == len(p)
    cache.close()


def test_an_empty_bucket_waits_when_configured(tmp_path, clock):
    waits = []

    def sleep(s):
        waits.append(s)
        clock.advance(s)

    cache, p = _on_disk(tmp_path, {"on_throttle": "wait", "max_wait": 10}, clock, sleep)
    _demote(cache)
    ask(cache, "a", p)
    _demote(cache)
    assert ask(cache, "a", p) == len(p)  # waited for the bucket, then loaded
    assert cache.stats()["throttled_waits"] == 1 and waits and 0 < waits[0] <= 10
    cache.close()


def _files(disk):
    return sorted((disk.root / "blocks").rglob("*.blk"))


def test_erasure_leaves_no_file_and_no_redis_key_of_the_tenant(tmp_path, redis_server):
    ram = tier_of("memory", tmp_path, capacity=1 << 20)
    disk = tier_of("disk", tmp_path)
    red = tier_of("redis", tmp_path, redis_server.url)
    cache = cache_with([ram, disk, red], {"a": {}, "b": {}})
    pa, pb = [prompt_of(i) for i in range(3)], [prompt_of(i) for i in range(3)]  # same tokens
    for p in pa:
        ask(cache, "a", p)
    for p in pb:
        ask(cache, "b", p)
    with cache._engine.lock:  # one copy in each tier: RAM -> disk -> Redis, then new RAM copies
        cache._engine.placement.make_room(0, cache.slots[0].used())
    cache.flush()
    with cache._engine.lock:
        cache._engine.placement.make_room(1, cache.slots[1].used() // 4)
    cache.flush()
    for p in pa[:1]:
        ask(cache, "a", p)  # promoted back into RAM, keeping slow copies
    a_keys = {k for p in pa for k in cache.prompt(p, "a").keys()}  # noqa: SIM118 (a Prompt method)
    client = redis_server.client()
    assert any(k[len(red.prefix) :] in a_keys for k in client.keys(red.prefix + b"*"))
    a_names = {k.hex() + ".blk" for k in a_keys}
    assert any(f.name in a_names for f in _files(disk))

    out = cache.erase_tenant("a")
    assert out["verified"] and out["in_use"] == 0 and out["erased_blocks"] >= 12
    assert not any(k[len(red.prefix) :] in a_keys for k in client.keys(red.prefix + b"*"))
    assert all(f.name not in a_names for f in _files(disk)) and _files(disk)  # b's files remain
    assert cache.slots[0].tenant_used("a") == 0 and cache.tenant_usage("a")["blocks"] == 0
    assert all(ask(cache, "a", p) == 0 for p in pa)  # a later identical prompt misses
    assert sum(ask(cache, "b", p) for p in pb) == 3 * 4 * BS  # b untouched
    cache.close()


@pytest.mark.parametrize("pinned", [False, True])
def test_clear_flushes_every_tier(tmp_path, pinned):
    cache = cache_with([tier_of("memory", tmp_path), tier_of("disk", tmp_path)], {"a": {}})
    ask(cache, "a", prompt_of(1))
    m = cache.lookup(cache.prompt(prompt_of(1), "a")) if pinned else None
    out = cache.clear()
    assert out["in_use"] == (4 if pinned else 0) and out["verified"] == (not pinned)
    if m is not None:
        assert cache.lookup(cache.prompt(prompt_of(1), "a")).hit_tokens == 0  # in use: a miss already
        cache.release(m)
        assert cache.sweep() == 4
    assert len(cache.index) == 0
    cache.close()


def _owners(client_nodes, prefix):
    """Tenant of every block under ``prefix``, read from the stored headers (every cluster node)."""
    from ctxcache.codec import read_header

    out = []
    for client in client_nodes:
        for name in client.scan_iter(match=prefix + b"*"):
            out.append(read_header(client.get(name)).tenant)
    return out


def _shared_redis(tmp_path, request, mode):
    """A factory of caches over one Redis prefix (single server or cluster), and the server(s)."""
    from ctxcache.tiers import RedisTier

    if mode == "single":
        servers = [request.getfixturevalue("redis_factory")()]
        url, opts = servers[0].url, {}
    else:
        servers = request.getfixturevalue("redis_cluster")
        url, opts = servers[0].url.rsplit("/", 1)[0], {"cluster": True}
    prefix = f"shared{mode}{id(tmp_path)}:"

    def cache():
        t = RedisTier(1 << 20, url=url, prefix=prefix, timeout=0.5, **opts)
        assert t.wait_ready()
        return cache_with([t], {"a": {}, "b": {}})

    writer = cache()
    for i in range(3):
        ask(writer, "a", prompt_of(i))
        ask(writer, "b", prompt_of(i))
    writer.flush()
    writer.close()
    clients = [s.client() for s in servers]
    before = _owners(clients, prefix.encode())
    assert before.count(b"a") == 12 and before.count(b"b") == 12
    return cache, lambda: _owners(clients, prefix.encode())


@pytest.mark.parametrize("mode", ["single", "cluster"])
def test_erasure_finds_redis_blocks_another_process_wrote(tmp_path, request, mode):
    """The erasing cache never loaded these blocks: only a SCAN of the prefix and the headers find them."""
    cache, owners = _shared_redis(tmp_path, request, mode)
    fresh = cache()
    out = fresh.erase_tenant("a")
    after = owners()
    assert b"a" not in after and after.count(b"b") == 12
    assert out["verified"] and out["erased_blocks"] == 12 and out["found_in_storage"] == 12
    assert ask(fresh, "a", prompt_of(0)) == 0 and ask(fresh, "b", prompt_of(0)) == 4 * BS
    fresh.close()


@pytest.mark.parametrize("mode", ["single", "cluster"])
def test_clear_finds_redis_blocks_another_process_wrote(tmp_path, request, mode):
    """A flush is verified only when the shared storage holds no block, whoever wrote it."""
    cache, owners = _shared_redis(tmp_path, request, mode)
    fresh = cache()
    ask(fresh, "a", prompt_of(7))  # and some of its own
    out = fresh.clear()
    assert owners() == []
    assert out["verified"] and out["found_in_storage"] == 24 and out["erased_blocks"] == 28
    assert ask(fresh, "b", prompt_of(0)) == 0
    fresh.close()


def test_discovered_blocks_are_charged_to_the_bucket(tmp_path, clock):
    """Blocks an earlier run left on disk are read by discovery: their bytes count against the
    tenant's bandwidth like any slow-tier load, so an empty bucket means recompute, not a free read."""
    disk_dir = tmp_path / "shared"

    def cache(tenants):
        ram = tier_of("memory", tmp_path, capacity=1 << 20)
        disk = DiskTier(1 << 20, path=disk_dir, fsync=False)
        return cache_with([ram, disk], tenants, clock=clock, on_throttle="recompute")

    writer = cache({"a": {}})
    p, q = prompt_of(1, n_blocks=8), prompt_of(2, n_blocks=8)
    ask(writer, "a", p)
    ask(writer, "a", q)
    writer.close()  # spills both to disk
    fresh = cache({"a": {"rate": 100, "burst": 100}})
    assert ask(fresh, "a", p) == len(p)  # a full bucket lets discovery read; its bytes are charged after
    assert ask(fresh, "a", q) == 0  # in debt: recompute instead of another free read
    assert fresh.stats()["throttled_recomputes"] == 1
    assert fresh.stats()["lost"] == 0 and fresh.stats()["discovered"] == 8
    fresh.close()
