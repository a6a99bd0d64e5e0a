"""An eviction pass on a Redis Cluster tier sends one delete batch spanning every master. With one
master hung, only its blocks' deletes fail: the cache must count, charge (to the tier and the
owner) and retry exactly those, and stop charging the blocks the healthy masters deleted. Before,
the whole batch raised, every block was charged again and counted in ``delete_errors``, and each
was deleted a second time at a later pass."""

from __future__ import annotations

import os
import signal
from collections.abc import Hashable, Iterable

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import RedisTier
from tests.conftest import wait_cluster_ok

from .tenancy_util import BS

PREFIX = b"dc:"
N = 24  # blocks: their keys fall on all three masters (checked)


class Recorded(RedisTier):
    """Logs the keys of every delete batch."""

    def __init__(self, *a: object, **kw: object) -> None:
        self.batches: list[list[Hashable]] = []
        super().__init__(*a, **kw)  # type: ignore[arg-type]

    def delete_many(self, keys: Iterable[Hashable]) -> int:
        keys = list(keys)
        self.batches.append(keys)
        return super().delete_many(keys)


def store(cache: ContextCache, i: int) -> None:
    cache.store([i * 1000 + j for j in range(BS)], [[np.full(16, i, np.float32)]], "default", 0)


def evict_all(cache: ContextCache) -> None:
    """One pass that evicts every block of the tier (one batch of deletes for the mover)."""
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())
    assert cache.flush(10)


def test_a_hung_master_fails_only_its_deletes_and_only_those_are_retried(redis_cluster):
    url = redis_cluster[0].url.rsplit("/", 1)[0]
    tier = Recorded(1 << 24, url=url, cluster=True, prefix=PREFIX.decode(), high=1.0, low=1.0, retry_interval=0.05)
    assert tier.wait_ready(5)
    cache = ContextCache([tier], block_size=BS)
    for i in range(N):
        store(cache, i)
    assert cache.flush(10)
    slot, blob = cache.slots[0], tier.used_bytes // N
    assert len(tier) == N and tier.used_bytes == N * blob
    hung = redis_cluster[1]
    on_hung = {name[len(PREFIX) :] for name in hung.client().keys(PREFIX + b"*")}
    assert 0 < len(on_hung) < N and all(n.client().keys(PREFIX + b"*") for n in redis_cluster)
    os.kill(hung.proc.pid, signal.SIGSTOP)
    try:
        evict_all(cache)
        s = cache.stats()
        assert s["delete_errors"] == len(on_hung)  # before the fix: N
        assert set(tier.keys()) == on_hung  # noqa: SIM118 (a Tier method); before: all N
        assert slot.used() == tier.used_bytes == len(on_hung) * blob  # before: N blocks
        assert len(tier.batches) == 1 and len(tier.batches[0]) == N  # one batch, every master (before: N more)
        landed = set(tier.batches[0]) - on_hung
        assert not any(n.client().keys(PREFIX + b"*") for n in redis_cluster if n is not hung)
        assert slot.tenant_used("default") == len(on_hung) * blob
        assert all(slot.holds(k) for k in on_hung) and not any(slot.holds(k) for k in landed)
        assert (s["lost"], s["write_errors"], s["evictions"]) == (0, 0, N)
    finally:
        os.kill(hung.proc.pid, signal.SIGCONT)
    wait_cluster_ok(redis_cluster)  # a pause past the node timeout fails the cluster for a moment
    assert tier.wait_ready(5)
    evict_all(cache)  # the next pass retries the left-over blocks
    assert [set(b) for b in tier.batches[1:]] == [on_hung]  # only they: none deleted twice
    assert cache.stats()["delete_errors"] == len(on_hung)
    assert len(tier) == 0 and slot.used() == tier.used_bytes == 0 and slot.by_tenant == {}
    assert not any(n.client().keys(PREFIX + b"*") for n in redis_cluster)
    cache.close()
