"""A delete asked of Redis while it is unreachable (here: hung by SIGSTOP, which keeps its data)
is never sent: the block is still in Redis after it comes back. The cache must count it in
``delete_errors``, keep charging the tier for it, and delete it at a later pass. Before RedisTier
raised, the failed round trip read as "0 deleted": nothing counted, and the block stayed in
Redis with nobody charging for it."""

from __future__ import annotations

import os
import signal

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import RedisTier

from .tenancy_util import BS

PREFIX = b"de:"


def toks(i: int) -> list[int]:
    return [i * 1000 + j for j in range(BS)]


def store(cache: ContextCache, i: int) -> None:
    cache.store(toks(i), [[np.full(16, i, np.float32)]], "default", 0)


def _redis_cache(url: str, blocks: int) -> tuple[ContextCache, RedisTier, int]:
    """A cache on one Redis tier holding exactly ``blocks`` blocks; returns it, its tier, a block's bytes."""
    probe = ContextCache([RedisTier(1 << 20, url=url, prefix="probe:", retry_interval=0.05)], block_size=BS)
    store(probe, 0)
    assert probe.flush(10)
    blob = probe.slots[0].used()
    probe.close()
    tier = RedisTier(blocks * blob, url=url, prefix=PREFIX.decode(), high=1.0, low=1.0, retry_interval=0.05)
    assert tier.wait_ready(5)
    return ContextCache([tier], block_size=BS), tier, blob


def test_a_delete_lost_while_redis_hangs_is_counted_charged_and_retried(redis_factory):
    server = redis_factory()
    raw = server.client()
    cache, tier, blob = _redis_cache(server.url, 4)
    for i in range(4):  # one at a time: a write landing while the next store makes room counts twice until reported
        store(cache, i)
        assert cache.flush(10)
    assert raw.dbsize() == 5  # 4 blocks + the probe's
    oldest = next(iter(tier.keys()))
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        # A read notices the hang first, so the delete below is never sent: a DEL that timed out
        # could still run once the server resumes, and the test would depend on that race.
        assert tier.get_blob(b"\0" * 16) is None and not tier.healthy
        store(cache, 4)  # needs room: the oldest block is evicted; its delete (and the write) cannot land
        assert cache.flush(10)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert tier.wait_ready(5)
    s = cache.stats()
    assert raw.exists(PREFIX + oldest)  # the delete never reached the server
    assert s["delete_errors"] == 1  # before the fix: 0
    assert oldest in tier and cache.slots[0].holds(oldest)  # before the fix: charged by nobody
    assert cache.slots[0].used() == tier.used_bytes == 4 * blob
    assert s["write_errors"] == 1  # the new block's write, refused while down
    for i in range(5, 10):  # Redis is back: a later pass deletes the left-over block
        store(cache, i)
        assert cache.flush(10)
    assert not raw.exists(PREFIX + oldest) and oldest not in tier
    assert cache.stats()["delete_errors"] == 1
    assert sorted(raw.scan_iter(match=PREFIX + b"*")) == sorted(PREFIX + k for k in tier.keys())  # noqa: SIM118 (a Tier method)
    assert cache.slots[0].used() == tier.used_bytes <= 4 * blob
    cache.close()
