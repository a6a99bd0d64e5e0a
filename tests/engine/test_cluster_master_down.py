"""A cache whose slow tier is a Redis Cluster keeps hitting the blocks on the healthy masters
while one master is hung, and serves the hung master's blocks again once it is back (from the
index: they were kept, see test_unavailable_tier.py). Before, the first lookup that touched the hung master marked the whole tier down: every
lookup missed the slow tier, and each block it held was counted lost, until the master was back."""

from __future__ import annotations

import os
import signal
import time

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import MemoryTier, RedisTier
from tests.conftest import wait_cluster_ok

from .tenancy_util import BS

PREFIX = b"em:"
N = 30  # one-block prompts: their keys fall on all three masters (checked)


def tokens(i: int) -> list[int]:
    return [i * 1000 + j for j in range(BS)]


def hits(cache: ContextCache, prompts: list[int]) -> set[int]:
    out = set()
    for i in prompts:
        m = cache.lookup(tokens(i))
        if m.hit_tokens == BS:
            out.add(i)
        cache.release(m)
    return out


def test_lookups_hit_the_healthy_masters_blocks_while_one_master_is_hung(cluster_partial):
    redis_cluster = cluster_partial
    url = redis_cluster[0].url.rsplit("/", 1)[0]
    tier = RedisTier(1 << 24, url=url, cluster=True, prefix=PREFIX.decode(), timeout=0.2, retry_interval=0.05)
    assert tier.wait_ready(5)
    cache = ContextCache([MemoryTier(1 << 24), tier], block_size=BS, promote=False)
    for i in range(N):
        cache.store(tokens(i), [[np.full(16, i, np.float32)]])
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())  # every block demoted to Redis
    assert cache.flush(10) and len(tier) == N and cache.slots[0].used() == 0
    hung = redis_cluster[1]
    key_of = {cache.prompt(tokens(i)).keys()[0]: i for i in range(N)}
    on_hung = {key_of[name[len(PREFIX) :]] for name in hung.client().keys(PREFIX + b"*")}
    assert 0 < len(on_hung) < N
    os.kill(hung.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        assert hits(cache, list(range(N))) == set(range(N)) - on_hung  # before: none
        took = time.monotonic() - t0
        assert took < 0.2 + 1.0  # one timeout (the first lookup on the hung master), not one per lookup (~N/3)
        assert tier.healthy and tier.masters_down == [f"127.0.0.1:{hung.port}"]
    finally:
        os.kill(hung.proc.pid, signal.SIGCONT)
    wait_cluster_ok(redis_cluster)
    assert tier.wait_ready(5)
    assert hits(cache, sorted(on_hung)) == on_hung  # back: served from Redis again
    cache.close()
