"""ContextCache.invalidate: a withdrawn document or system prompt leaves every tier with the whole
subtree cached under it (every prompt that continued it), including blocks only persistent storage
holds (another process's, an earlier run's), never served again, held blocks included."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import DiskTier, MemoryTier, RedisTier

from .tenancy_util import BS, cache_with, payloads

TENANTS = {"a": {}}
DOC = list(range(1, 1 + 2 * BS))  # the withdrawn document: 2 blocks
Q1 = DOC + [500 + i for i in range(BS)]  # two questions asked about it (its subtree)
Q2 = DOC + [600 + i for i in range(2 * BS)]
OTHER = [900 + i for i in range(2 * BS)]  # unrelated
_prefix = itertools.count()


def _store(cache: ContextCache, tokens: list[int]) -> None:
    prompt = cache.prompt(tokens, "a")
    with cache.lookup(prompt) as m:
        cache.store(prompt, payloads(tokens, m.n_blocks), first_block=m.n_blocks)
    assert cache.flush(10)


def _hit(cache: ContextCache, tokens: list[int]) -> int:
    with cache.lookup(tokens, "a") as m:
        for i, p in enumerate(m.payloads):  # a hit is the block's own payload
            assert float(np.asarray(p[0])[0]) == tokens[i * BS]
        return m.hit_tokens


def _key(cache: ContextCache, tokens: list[int], block: int) -> bytes:
    return cache.prompt(tokens, "a").keys()[block]


def _filled(tiers: list[Any]) -> ContextCache:
    cache = cache_with(tiers, TENANTS)
    for tokens in (Q1, Q2, OTHER):
        _store(cache, tokens)
    return cache


def test_the_block_and_its_whole_subtree_leave_and_nothing_else(tmp_path):
    cache = _filled([MemoryTier(1 << 20)])
    assert len(cache.index) == 2 + 1 + 2 + 2
    out = cache.invalidate(_key(cache, DOC, 1))
    # DOC's second block, Q1's block under it, Q2's two: 4; DOC's first block and OTHER stay.
    assert out == {"key": _key(cache, DOC, 1).hex(), "erased_blocks": 4, "found_in_storage": 0, "in_use": 0,
                   "verified": True}  # fmt: skip
    assert len(cache.index) == 1 + 2
    assert _hit(cache, DOC) == BS and _hit(cache, Q1) == BS and _hit(cache, Q2) == BS
    assert _hit(cache, OTHER) == 2 * BS
    assert cache.stats()["erased"] == 4
    cache.close()


def test_invalidating_again_or_an_unknown_key_finds_nothing_and_is_verified(tmp_path):
    cache = _filled([MemoryTier(1 << 20), DiskTier(1 << 20, path=tmp_path / "d", fsync=False)])
    key = _key(cache, DOC, 0)
    assert cache.invalidate(key)["erased_blocks"] == 5
    again = {"key": key.hex(), "erased_blocks": 0, "found_in_storage": 0, "in_use": 0, "verified": True}
    assert cache.invalidate(key) == again
    unknown = bytes(16)
    assert cache.invalidate(unknown) == dict(again, key=unknown.hex())
    assert _hit(cache, OTHER) == 2 * BS
    cache.close()


def test_the_audit_log_records_each_invalidation(caplog):
    cache = _filled([MemoryTier(1 << 20)])
    key = _key(cache, Q1, 2)
    with caplog.at_level(logging.INFO, logger="ctxcache.audit"):
        cache.invalidate(key)
    got = [r.getMessage() for r in caplog.records if r.name == "ctxcache.audit"]
    assert f"invalidate key={key.hex()} blocks=1 found_in_storage=0 in_use=0 verified=True" in got
    cache.close()


def test_a_block_in_use_is_not_served_after_and_leaves_once_released():
    cache = _filled([MemoryTier(1 << 20)])
    held = cache.lookup(Q2, "a")
    assert held.hit_tokens == 4 * BS
    out = cache.invalidate(_key(cache, DOC, 1))
    assert out["in_use"] > 0 and not out["verified"]
    assert _hit(cache, Q2) == BS  # a miss from the withdrawn block on, while still held
    assert cache._engine._sweeper is not None  # started: no tenant TTL had started it
    cache.release(held)
    assert _hit(cache, Q2) == BS and _hit(cache, Q1) == BS  # and after release
    assert cache.sweep() > 0
    assert len(cache.index) == 1 + 2  # DOC's first block and OTHER
    assert cache.invalidate(_key(cache, DOC, 1))["verified"]
    _store(cache, Q2)  # the same tokens stored again later: new content, cached anew
    assert _hit(cache, Q2) == 4 * BS
    cache.close()


def test_disk_blocks_an_earlier_run_left_are_found_by_their_headers(tmp_path):
    path = tmp_path / "disk"
    writer = _filled([MemoryTier(1 << 20), DiskTier(1 << 20, path=path, fsync=False)])
    writer.close()  # RAM spilled to disk
    files = lambda: len(list((path / "blocks").rglob("*.blk")))  # noqa: E731
    assert files() == 7
    cache = cache_with([MemoryTier(1 << 20), DiskTier(1 << 20, path=path, fsync=False)], TENANTS)
    assert len(cache.index) == 0  # charged orphans: nothing indexed until a lookup discovers them
    out = cache.invalidate(_key(cache, DOC, 1))
    assert out == {"key": _key(cache, DOC, 1).hex(), "erased_blocks": 4, "found_in_storage": 4, "in_use": 0,
                   "verified": True}  # fmt: skip
    assert files() == 3
    assert _hit(cache, Q2) == BS and _hit(cache, OTHER) == 2 * BS
    cache.close()


def test_a_subtree_indexed_in_part_is_found_whole_on_disk(tmp_path):
    """The middle of the subtree indexed (discovered by a lookup), its leaves only on disk."""
    path = tmp_path / "disk"
    _filled([DiskTier(1 << 20, path=path, fsync=False)]).close()
    cache = cache_with([DiskTier(1 << 20, path=path, fsync=False)], TENANTS)
    assert _hit(cache, DOC) == 2 * BS  # DOC's blocks indexed; Q1's and Q2's only on disk
    out = cache.invalidate(_key(cache, DOC, 0))
    assert out["verified"] and out["erased_blocks"] == 5 and out["found_in_storage"] == 3
    assert not list((path / "blocks").rglob(f"{_key(cache, Q2, 3).hex()}.blk"))
    assert _hit(cache, Q1) == 0 and _hit(cache, Q2) == 0 and _hit(cache, OTHER) == 2 * BS
    cache.close()


def _redis(redis_url: str, prefix: str) -> RedisTier:
    tier = RedisTier(1 << 20, url=redis_url, prefix=prefix, timeout=0.5)
    assert tier.wait_ready()
    return tier


def test_redis_blocks_only_another_cache_stored_are_found_and_both_caches_miss(redis_url):
    prefix = f"inv{next(_prefix)}:"
    other = cache_with([_redis(redis_url, prefix)], TENANTS)  # another process on the same Redis
    for tokens in (Q1, Q2, OTHER):
        _store(other, tokens)
    here = cache_with([MemoryTier(1 << 20), _redis(redis_url, prefix)], TENANTS)
    assert _hit(here, DOC) == 2 * BS  # here: DOC indexed (in RAM and Redis); Q1, Q2 only in Redis
    out = here.invalidate(_key(here, DOC, 1))
    assert out["verified"] and out["in_use"] == 0
    assert out["found_in_storage"] == 3 and out["erased_blocks"] == 4  # DOC's second block, then 1 + 2
    client = here.tiers[1]._client
    stored = {k[len(prefix) :] for k in client.scan_iter(match=prefix + "*") if len(k) == len(prefix) + 16}
    assert stored == {_key(here, DOC, 0), *(_key(here, OTHER, i) for i in range(2))}
    for cache in (here, other):
        assert _hit(cache, Q1) == BS and _hit(cache, Q2) == BS and _hit(cache, DOC) == BS
        assert _hit(cache, OTHER) == 2 * BS
    here.close()
    other.close()


def test_redis_an_unreachable_tier_leaves_it_unverified(redis_factory):
    server = redis_factory()
    cache = _filled([MemoryTier(1 << 20), _redis(server.url, f"inv{next(_prefix)}:")])
    server.kill()
    out = cache.invalidate(_key(cache, DOC, 1))
    assert not out["verified"]
    assert _hit(cache, Q2) == BS  # still gone from this process
    cache.close()
