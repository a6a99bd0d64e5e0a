"""A slow tier that cannot be reached right now (a Redis Cluster master hung, the whole Redis server
hung, a disk read failing with an I/O error) makes its blocks miss, but they are not lost: not
counted ``lost``, not pruned from the index, still charged to the tier, and hit again (without
discovery) once the tier answers. A block really gone or damaged is still lost and pruned. Before,
every such miss was counted lost, pruned and uncharged, and only discovery found the blocks again.
The faults are real: redis-server processes stopped with SIGSTOP (they keep their data)."""

from __future__ import annotations

import os
import signal
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ctxcache import ContextCache
from ctxcache.engine.erasure import _verify
from ctxcache.tiers import DiskTier, MemoryTier, RedisTier, Tier
from ctxcache.tiers.fake import FakeSlowTier
from tests.conftest import RedisServer, wait_cluster_ok

from .tenancy_util import BS

N = 30  # one-block prompts: their keys fall on all three masters of the cluster (checked)


def tokens(i: int) -> list[int]:
    return [i * 1000 + j for j in range(BS)]


def filled(tier: Tier) -> tuple[ContextCache, dict[Hashable, int]]:
    """A cache whose N blocks were all demoted into ``tier``; each block's key -> its prompt."""
    cache = ContextCache([MemoryTier(1 << 24), tier], block_size=BS, promote=False)
    for i in range(N):
        cache.store(tokens(i), [[np.full(16, i, np.float32)]])
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())
    assert cache.flush(10) and len(tier) == N and cache.slots[0].used() == 0
    return cache, {cache.prompt(tokens(i)).keys()[0]: i for i in range(N)}


def hits(cache: ContextCache, prompts: list[int]) -> set[int]:
    out = set()
    for i in prompts:
        with cache.lookup(tokens(i)) as m:
            if m.hit_tokens == BS:
                out.add(i)
    return out


def kept(cache: ContextCache, tier: Tier, keys: list[Hashable]) -> bool:
    """Every key still indexed on the slow tier and charged by it."""
    index = cache._engine.index
    return all((n := index.get(k)) is not None and n.tier == 1 and k in tier and tier.nbytes(k) > 0 for k in keys)


@contextmanager
def stopped(server: RedisServer) -> Iterator[None]:
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


def test_a_hung_cluster_master_s_blocks_miss_but_are_kept_and_hit_again(cluster_partial):
    url = cluster_partial[0].url.rsplit("/", 1)[0]
    tier = RedisTier(1 << 24, url=url, cluster=True, prefix="ua:", timeout=0.2, retry_interval=0.05)
    assert tier.wait_ready(5)
    cache, key_of = filled(tier)
    hung = cluster_partial[1]
    on_hung = {key_of[name[3:]] for name in hung.client().keys(b"ua:*")}
    hung_keys = [k for k, i in key_of.items() if i in on_hung]
    assert 0 < len(on_hung) < N
    used = tier.used_bytes
    with stopped(hung):
        assert hits(cache, list(range(N))) == set(range(N)) - on_hung
        assert hits(cache, sorted(on_hung)) == set()  # still missing, answered at once
        s = cache.stats()
        assert s["lost"] == 0 and s["unavailable_misses"] == 2 * len(on_hung)  # before: lost == len(on_hung)
        assert kept(cache, tier, hung_keys) and tier.used_bytes == used  # indexed and charged
    wait_cluster_ok(cluster_partial)
    assert tier.wait_ready(5)
    discovered = cache.stats()["discovered"]
    assert hits(cache, sorted(on_hung)) == on_hung  # back, from the index
    assert cache.stats()["discovered"] == discovered and cache.stats()["lost"] == 0
    cache.close()
    tier.close()


def test_a_hung_redis_server_s_blocks_miss_but_are_kept_and_hit_again(redis_factory):
    server = redis_factory()
    tier = RedisTier(1 << 24, url=server.url, prefix="ub:", timeout=0.1, retry_interval=0.05)
    assert tier.wait_ready(5)
    cache, key_of = filled(tier)
    used = tier.used_bytes
    with stopped(server):
        assert hits(cache, list(range(N))) == set()
        assert not tier.healthy
        s = cache.stats()
        assert s["lost"] == 0 and s["unavailable_misses"] == N
        assert kept(cache, tier, list(key_of)) and tier.used_bytes == used
    assert tier.wait_ready(5)
    discovered = cache.stats()["discovered"]
    assert hits(cache, list(range(N))) == set(range(N))
    assert cache.stats()["discovered"] == discovered and cache.stats()["lost"] == 0
    cache.close()
    tier.close()


def test_a_damaged_redis_value_is_still_lost_and_pruned(redis_server):
    tier = RedisTier(1 << 24, url=redis_server.url, prefix="uc:", timeout=0.5)
    assert tier.wait_ready(5)
    cache, key_of = filled(tier)
    key = next(k for k, i in key_of.items() if i == 3)
    raw = redis_server.client()
    blob = bytearray(raw.get(b"uc:" + key))
    blob[-1] ^= 0xFF
    raw.set(b"uc:" + key, bytes(blob))
    assert hits(cache, [3]) == set()
    s = cache.stats()
    assert (s["lost"], s["unavailable_misses"], tier.corrupt) == (1, 0, 1)
    assert cache._engine.index.get(key) is None and key not in tier  # pruned, uncharged
    cache.close()
    tier.close()


def test_a_disk_read_error_is_a_miss_not_a_loss(tmp_path: Path):
    tier = DiskTier(1 << 24, path=tmp_path / "d", fsync=False)
    cache, key_of = filled(tier)
    key = next(k for k, i in key_of.items() if i == 5)
    assert isinstance(key, bytes)
    f = tmp_path / "d" / "blocks" / key[:1].hex() / f"{key.hex()}.blk"
    moved = f.with_suffix(".away")
    f.rename(moved)
    f.mkdir()  # the read now fails with an OSError that is not "no such file" (IsADirectoryError)
    assert hits(cache, [5, 6]) == {6}
    s = cache.stats()
    assert s["lost"] == 0 and s["unavailable_misses"] == 1 and kept(cache, tier, [key])
    f.rmdir()
    moved.rename(f)
    assert hits(cache, [5]) == {5} and cache.stats()["lost"] == 0
    f.unlink()  # really gone: lost and pruned, as before
    assert hits(cache, [5]) == set()
    assert cache.stats()["lost"] == 1 and cache._engine.index.get(key) is None and key not in tier
    cache.close()


def test_erasure_is_not_verified_while_a_tier_holding_the_keys_is_unreachable():
    slow = FakeSlowTier(1 << 20)
    cache = ContextCache([MemoryTier(1 << 20), slow], block_size=BS)
    slow.put(b"k" * 16, b"v")
    assert not _verify(cache._engine, [b"k" * 16])  # readable: still stored
    slow.down = True
    assert not _verify(cache._engine, [b"k" * 16])  # before: True (a miss read as "erased")
    slow.down = False
    slow.delete(b"k" * 16)
    assert _verify(cache._engine, [b"k" * 16])
    cache.close()
