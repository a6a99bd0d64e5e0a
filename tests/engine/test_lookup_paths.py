"""Lookup paths the request tests do not reach: the usage of a miss on the hot path, and a block
that fails verification in an encoded RAM tier (the lookup's first phase, no I/O)."""

from __future__ import annotations

import numpy as np

from ctxcache import ContextCache
from ctxcache.tiers import MemoryTier

BS = 4


def _payloads(n: int) -> list[list[np.ndarray]]:
    return [[np.full(16, i, np.float32)] for i in range(n)]


def test_a_miss_reports_no_tier_on_every_path():
    hot = ContextCache([MemoryTier(1 << 20)], block_size=BS)  # one tier of live objects: the hot path
    warm = ContextCache([MemoryTier(1 << 20, mode="warm", codec="raw")], block_size=BS)
    for cache in (hot, warm):
        with cache.lookup(list(range(3 * BS))) as m:
            assert m.hit_tokens == 0 and m.usage.by_tier == {} and m.usage.uncached_tokens == 3 * BS
        cache.store(list(range(2 * BS)), _payloads(2), "default", first_block=0)
        with cache.lookup(list(range(3 * BS))) as m:
            assert m.usage.by_tier == {"memory": 2 * BS} and m.usage.uncached_tokens == BS


def _corrupt(tier: MemoryTier, key: bytes) -> None:
    blob = tier.get_blob(key)
    assert blob is not None
    tier.put_blob(key, blob[:-1] + bytes([blob[-1] ^ 0xFF]))


def test_a_corrupt_block_in_an_encoded_ram_tier_is_lost_then_repaired():
    tier = MemoryTier(1 << 20, mode="warm", codec="raw")
    cache = ContextCache([tier], block_size=BS)
    toks = list(range(4 * BS))
    prompt = cache.prompt(toks)
    cache.store(prompt, _payloads(4), first_block=0)
    _corrupt(tier, prompt.keys()[2])
    with cache.lookup(prompt) as m:
        assert m.n_blocks == 2  # the prefix ends at the block that failed verification
        assert [float(p[0][0]) for p in m.payloads] == [0.0, 1.0]
    s = cache.stats()
    assert s["lost"] == 1 and s["corrupt"] == 1
    assert cache.slots[0].tenant_used("default") == tier.used_bytes  # its bytes left the accounting
    cache.store(prompt, _payloads(4)[2:], first_block=2)
    assert cache.stats()["repaired"] == 1
    with cache.lookup(prompt) as m:
        assert m.n_blocks == 4 and float(m.payloads[2][0][0]) == 2.0


def _hot_warm(promote: bool = True) -> ContextCache:
    return ContextCache.from_config({"block_size": BS, "promote": promote, "tiers": [
        {"kind": "memory", "capacity": 200, "high": 1.0, "low": 1.0, "name": "hot"},
        {"kind": "memory", "capacity": 300, "high": 1.0, "low": 1.0, "name": "warm"},
    ]})  # fmt: skip


def _put(cache: ContextCache, toks: list[int]) -> None:
    with cache.lookup(toks) as m:
        cache.store(toks, [bytes(100)] * (len(toks) // BS - m.n_blocks), "default", first_block=m.n_blocks)


def test_a_hit_in_a_lower_ram_tier_moves_up_without_any_slow_tier():
    """docs/storage.md: hits below the top tier are promoted. Between RAM tiers the lookup does
    no I/O; a full hit there must be promoted like one that went through the slow-tier phase."""
    cache = _hot_warm()
    for p in range(3):
        _put(cache, [p] * BS)  # hot holds 2 blocks of 100 B: block 0 is demoted to warm
    assert cache.stats()["tiers"]["warm"]["blocks"] == 1
    with cache.lookup([0] * BS) as m:
        assert m.usage.by_tier == {"warm": BS}
    with cache.lookup([0] * BS) as m:
        assert m.usage.by_tier == {"hot": BS} and m.payloads == [bytes(100)]
    s = cache.stats()
    assert s["promotions"] == 1 and s["tiers"]["hot"]["blocks"] == 2 and s["tiers"]["warm"]["blocks"] == 1
    assert s["blocks"] == 3  # moved, not copied: the block demoted to make room is the one in warm


def test_promotion_between_ram_tiers_can_be_turned_off():
    cache = _hot_warm(promote=False)
    for p in range(3):
        _put(cache, [p] * BS)
    for _ in range(2):
        with cache.lookup([0] * BS) as m:
            assert m.usage.by_tier == {"warm": BS}
    assert cache.stats()["promotions"] == 0


def _mem_disk(path, mem: int = 10_000) -> dict:
    return {"block_size": BS, "tiers": [
        {"kind": "memory", "capacity": mem, "high": 1.0, "low": 1.0},
        {"kind": "disk", "path": str(path), "capacity": "1MiB", "fsync": False},
    ]}  # fmt: skip


def test_blocks_discovered_after_an_indexed_prefix_hang_under_it(tmp_path):
    """docs/ARCHITECTURE.md: discovered blocks are indexed under the matched prefix."""
    toks = list(range(4 * BS))
    blobs = [bytes([i]) * 32 for i in range(4)]
    writer = ContextCache.from_config(_mem_disk(tmp_path))
    writer.store(toks, blobs, "default", first_block=0)
    writer.close()  # spilled to disk
    reader = ContextCache.from_config(_mem_disk(tmp_path))
    reader.store(toks[: 2 * BS], blobs[:2], "default", first_block=0)  # indexed, in RAM
    keys = reader.prompt(toks).keys()
    with reader.lookup(toks) as m:
        assert m.payloads == blobs and reader.stats()["discovered"] == 2
    index = reader.index
    assert index.get(keys[2]).parent == keys[1] and index.get(keys[3]).parent == keys[2]
    assert not index.is_evictable(keys[1]) and index.is_evictable(keys[3])  # only the leaf may go
    assert reader.evict_all() == 4 and len(index) == 0
    reader.close()


def test_a_hit_keeps_a_chains_ancestors_more_recent_than_its_leaf(tmp_path):
    """The first blocks of a prompt are the ones other prompts share: under pressure the
    deepest block of a hit chain leaves the fast tier first."""
    cache = ContextCache.from_config(_mem_disk(tmp_path, mem=4 * 32))  # 4 blocks of 32 B
    toks = list(range(4 * BS))
    cache.store(toks, [bytes([i]) * 32 for i in range(4)], "default", first_block=0)
    for _ in range(2):
        with cache.lookup(toks) as m:
            assert m.usage.by_tier == {"memory": 4 * BS}
    cache.store([99] * BS, [bytes(32)], "default", first_block=0)  # one block must leave RAM
    with cache.lookup(toks[: 3 * BS]) as m:
        assert m.usage.by_tier == {"memory": 3 * BS}  # the leaf went to disk, not the root
    cache.close()


def test_first_missing_finds_the_first_none_by_identity():
    """Payloads may be numpy arrays, which answer ``==`` elementwise: the check is by identity."""
    from ctxcache.engine.lookup import first_missing

    a, b = np.zeros(3), np.ones(2)
    assert first_missing([a, b, a]) == 3
    assert first_missing([]) == 0
    assert first_missing([None]) == 0
    assert first_missing([a, b, None, a, None]) == 2
    assert first_missing([b"x", 0, "", a, None]) == 4  # falsy payloads are not missing
