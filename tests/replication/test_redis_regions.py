"""Regions on real redis-servers (one per region), real ContextCaches over them, links through a
proxy that can be cut: the partition-erasure case of issue 28, replayed step by step.

Each region is what a deployment runs: a worker (its own RAM, the region's Redis as its shared
tier, a Follower of the region's log) and the region's replicator (CacheEffects over a cache of
the shared tier only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctxcache.replication import CacheEffects, Follower, RedisLog, Replicator
from ctxcache.tiers import DiskTier, MemoryTier, RedisTier

from ..engine.tenancy_util import BS, ask, cache_with, prompt_of
from .linkproxy import LinkProxy

TENANTS = {"acme": {}, "other": {}}


class Region:
    def __init__(self, name: str, server: Any, peers: dict[str, str], disk: Path, limit: int = 1_000_000) -> None:
        self.name, self.server, self.peer_urls, self.limit, self.disk = name, server, peers, limit, disk
        self.worker = self._worker()
        self.shared = cache_with([self._redis_tier()], TENANTS)
        self.log = RedisLog(server.url, name, limit=limit)
        self.follower = Follower(self.log, name, f"w-{name}", CacheEffects(self.worker))
        self.follower.catch_up()
        self.rep = self._replicator()

    def _redis_tier(self) -> RedisTier:
        t = RedisTier(1 << 22, url=self.server.url, prefix="kv:", timeout=0.5)
        assert t.wait_ready()
        return t

    def _worker(self) -> Any:  # RAM over its own disk over the region's Redis
        disk = DiskTier(1 << 22, path=self.disk, fsync=False, write="through")
        return cache_with([MemoryTier(1 << 20), disk, self._redis_tier()], TENANTS)

    def _replicator(self) -> Replicator:
        peers = {p: RedisLog(u, p, timeout=0.3) for p, u in self.peer_urls.items()}
        return Replicator(self.name, RedisLog(self.server.url, self.name, limit=self.limit), peers,
                          CacheEffects(self.shared))  # fmt: skip

    def restart(self) -> None:
        """Every process of the region stops and starts again, on the same Redis."""
        self.worker.close()
        self.shared.close()
        self.worker, self.shared = self._worker(), cache_with([self._redis_tier()], TENANTS)
        self.follower = Follower(self.log, self.name, f"w-{self.name}", CacheEffects(self.worker))
        self.follower.catch_up()
        self.rep = self._replicator()

    def stored_of(self, tenant: str) -> list[bytes]:
        keys = self.shared.tiers[0].stored_keys_of(tenant.encode())
        assert keys is not None
        return list(keys)

    def indexed_of(self, tenant: str) -> int:
        return sum(1 for n in self.worker.index if n.tag == tenant)

    def close(self) -> None:
        self.worker.close()
        self.shared.close()


def settle(regions: list[Region], rounds: int = 50) -> None:
    for _ in range(rounds):
        busy = sum(r.rep.step() for r in regions)
        busy += sum(r.follower.poll() for r in regions)
        if not busy:
            return
    raise AssertionError("replication did not go quiet")


@pytest.fixture
def two(redis_factory, tmp_path):
    sa, sb = redis_factory(), redis_factory()
    ab, ba = LinkProxy(sb.port), LinkProxy(sa.port)  # a's view of b's Redis, b's of a's
    a, b = Region("a", sa, {"b": ab.url}, tmp_path / "a"), Region("b", sb, {"a": ba.url}, tmp_path / "b")
    yield a, b, (ab, ba)
    for r in (a, b):
        r.close()
    ab.close()
    ba.close()


def test_an_erasure_made_during_a_partition_wins_over_the_other_regions_stores(two):
    a, b, links = two
    for r in (a, b):
        ask(r.worker, "acme", prompt_of(1))
        ask(r.worker, "other", prompt_of(2))
    settle([a, b])
    assert a.stored_of("acme") and b.stored_of("acme")
    for link in links:
        link.cut()
    out = a.worker.erase_tenant("acme")  # what DELETE /v1/admin/tenants/acme/cache does in a
    assert out["verified"]
    a.follower.submit("erase_tenant", "acme")
    for i in range(3, 6):  # b keeps serving and storing the tenant, unaware
        ask(b.worker, "acme", prompt_of(i))
    settle([a, b])
    assert not a.rep.up["b"] and not b.rep.up["a"]
    assert a.rep.queued()["b"] >= 1  # waiting in a's log, counted
    assert b.stored_of("acme") and b.indexed_of("acme") > 0
    assert b.worker.flush(10)
    assert b.worker.slots[1].tenant_used("acme") > 0  # on b's own disk too
    for link in links:
        link.heal()
    settle([a, b])
    for r in (a, b):
        assert r.stored_of("acme") == [] and r.indexed_of("acme") == 0, r.name
        assert r.stored_of("other") and r.indexed_of("other") > 0  # only that tenant's
        assert r.worker.tenant_usage("acme")["blocks"] == 0
    results = b.log.results()
    mine = {k.split(" ")[1]: v for k, v in results.items() if k.endswith(" replicator") or k.endswith(" w-b")}
    assert mine["replicator"]["verified"] and mine["w-b"]["verified"]  # complete in region b
    assert mine["w-b"]["erased_blocks"] >= 3 * 4  # the blocks b stored during the partition
    assert a.rep.queued()["b"] == 0 and a.rep.state.digest() == b.rep.state.digest()
    for r in (a, b):  # nothing comes back after a restart of either region
        r.restart()
    settle([a, b])
    for r in (a, b):
        assert r.stored_of("acme") == [] and r.indexed_of("acme") == 0
        disk = r.worker.slots[1]  # its own disk, as read back at the restart: none either
        assert disk.tenant_used("acme") == 0 and disk.tenant_used("other") > 0
        assert ask(r.worker, "acme", prompt_of(1)) == 0
    assert a.rep.state.digest() == b.rep.state.digest()


def test_a_store_made_after_the_region_applied_the_erasure_is_new_data(two):
    a, b, _ = two
    ask(b.worker, "acme", prompt_of(1))
    a.follower.submit("erase_tenant", "acme")
    settle([a, b])
    assert b.stored_of("acme") == []
    ask(b.worker, "acme", prompt_of(1))  # asked again after the erasure: the user's new data
    settle([a, b])
    assert b.worker.flush(10)
    assert b.stored_of("acme") and ask(b.worker, "acme", prompt_of(1)) == 4 * BS


def test_a_peer_further_behind_than_the_log_keeps_is_healed_by_a_full_sync(redis_factory, tmp_path):
    sa, sb = redis_factory(), redis_factory()
    ab = LinkProxy(sb.port)
    a = Region("a", sa, {"b": ab.url}, tmp_path / "a", limit=10)
    b = Region("b", sb, {"a": sa.url}, tmp_path / "b", limit=10)
    try:
        ab.cut()
        for i in range(600):  # MAXLEN ~ 10 trims a's log far past b's position
            a.follower.submit("ttl", "acme" if i % 2 else "other", float(60 + i))
            if i % 100 == 99:
                settle([a])
        settle([a])
        assert a.log.first_seq() > 1
        settle([b])
        assert b.rep.stats["full_syncs"] >= 1
        assert a.rep.state.metadata() == b.rep.state.metadata()
        assert b.rep.state.keys["t:acme"].value("ttl") == 60.0 + 599
    finally:
        a.close()
        b.close()
        ab.close()


@pytest.fixture
def three(redis_factory, tmp_path):
    servers = {n: redis_factory() for n in "abc"}
    links = {(n, p): LinkProxy(servers[p].port) for n in "abc" for p in "abc" if n != p}
    regions = [Region(n, servers[n], {p: links[(n, p)].url for p in "abc" if p != n}, tmp_path / n) for n in "abc"]
    yield regions, links
    for r in regions:
        r.close()
    for link in links.values():
        link.close()


def test_concurrent_ttls_invalidations_and_pins_in_three_regions_converge(three):
    regions, links = three
    a, b, c = regions
    prompts = {r.name: prompt_of(10 + i) for i, r in enumerate(regions)}
    for r in regions:  # every region holds every region's prompt
        for p in prompts.values():
            ask(r.worker, "acme", p)
    settle(regions)
    for link in links.values():
        link.cut()
    root = {n: a.worker.prompt(p, "acme").keys()[1] for n, p in prompts.items()}  # block 1: blocks 1.. go
    pin_key = a.worker.prompt(prompts["a"], "acme").keys()[0]
    for r, ttl in zip(regions, (300.0, 60.0, None)):  # the same tenant, three TTLs at once
        r.follower.submit("ttl", "acme", ttl)
        r.follower.submit("invalidate", root[r.name].hex())  # each withdraws its own document
    a.follower.submit("pin", pin_key.hex(), True)
    c.follower.submit("pin", pin_key.hex(), False)
    settle(regions)
    assert len({r.rep.state.digest() for r in regions}) == 3  # cut off: each has only its own
    for link in links.values():
        link.heal()
    settle(regions)
    meta = [r.rep.state.metadata() for r in regions]
    assert meta[0] == meta[1] == meta[2]
    assert len({r.rep.state.digest() for r in regions}) == 1
    ks = a.rep.state.keys
    assert ks["t:acme"].value("ttl") == 60.0  # the shortest of the concurrent three
    assert ks[f"p:{pin_key.hex()}"].value("pin") is False  # concurrent pin and unpin: unpinned
    assert sum(a.rep.state.conflicts.values()) > 0
    for r in regions:
        assert r.worker.pinned_prefixes() == []
        held = set(r.shared.tiers[0].stored_keys_of(b"acme") or [])
        for n, p in prompts.items():
            keys = r.worker.prompt(p, "acme").keys()
            assert keys[0] in held and not held & set(keys[1:]), (r.name, n)  # block 0 stays, 1.. gone
            assert keys[1] not in r.worker.index
        assert r.worker.tenancy.tenants["acme"].ttl == 60.0
