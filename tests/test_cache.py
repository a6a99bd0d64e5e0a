from __future__ import annotations

import hashlib
import threading
import types

import numpy as np
import pytest

import ctxcache.keys as keys_module
from ctxcache import ContextCache, MatchReleasedError, Namespace, PayloadError, accel

from .conftest import payload_for

BS = 4


def make(capacity=10_000, policy="lru", tiers=None, **kw):
    tiers = tiers or [{"kind": "memory", "capacity": capacity, "policy": policy, **kw}]
    return ContextCache.from_config({"block_size": BS, "tiers": tiers})


def put(cache, tokens, ns="default", size=None):
    """lookup + store the rest + release, like an integration does. Returns (hit_tokens, usage)."""
    with cache.lookup(tokens, ns) as m:
        n = len(tokens) // BS
        pl = [(payload_for(ns, tokens, i, BS) if size is None else bytes(size)) for i in range(m.n_blocks, n)]
        usage = cache.store(tokens, pl, ns, first_block=m.n_blocks)
        return m.hit_tokens, m.usage + usage


def test_lookup_store_release_roundtrip():
    cache = make()
    toks = list(range(10))  # 2 full blocks + 2 tokens
    hit, usage = put(cache, toks)
    assert hit == 0
    assert usage.cache_creation_tokens == 8 and usage.uncached_tokens == 10 and usage.cache_read_tokens == 0
    m = cache.lookup(toks + [1, 2, 3])
    assert (m.hit_tokens, m.n_blocks) == (8, 2)
    assert m.payloads == [payload_for("default", toks, i, BS) for i in range(2)]
    assert m.usage.cache_read_tokens == 8 and m.usage.uncached_tokens == 5 and m.usage.by_tier == {"memory": 8}
    cache.release(m)
    with pytest.raises(MatchReleasedError):
        cache.release(m)
    s = cache.stats()
    assert s["blocks"] == 2 and s["lookups"] == 2 and s["hits"] == 2 and s["hit_tokens"] == 8
    assert s["tiers"]["memory"]["blocks"] == 2


def test_diverging_prompts_share_only_the_common_blocks():
    cache = make()
    a = list(range(16))
    b = list(range(9)) + [99] * 7  # first differs at position 9 -> floor(9/4) = 2 blocks
    put(cache, a)
    hit, usage = put(cache, b)
    assert hit == 8 and usage.cache_creation_tokens == 8
    assert cache.stats()["blocks"] == 6


def test_namespaces_are_isolated():
    cache = make()
    toks = list(range(12))
    put(cache, toks, "tenant-a")
    assert cache.lookup(toks, "tenant-b").hit_tokens == 0
    assert cache.lookup(toks, Namespace("tenant-a")).hit_tokens == 12


def test_other_model_or_salt_gets_no_hit():
    a = ContextCache.from_config({"block_size": BS, "model": "m1"})
    b = ContextCache.from_config({"block_size": BS, "model": "m2"})
    toks = list(range(8))
    assert a.hasher.keys(toks, a.namespace()) != b.hasher.keys(toks, b.namespace())


class _CollidingXXH3:
    """xxh3 stand-in whose keys ignore the token bytes: every prompt's block i gets the same key."""

    def __init__(self, parent: bytes, seed: int) -> None:
        self.parent = bytes(parent)

    def update(self, data: object) -> None:
        pass

    def digest(self) -> bytes:
        return hashlib.sha256(self.parent).digest()[:16]


def test_hash_collision_is_a_miss_never_a_wrong_payload(monkeypatch):
    fake = types.SimpleNamespace(
        xxh3_128=_CollidingXXH3, xxh3_128_digest=lambda data, seed: _CollidingXXH3(bytes(data[:16]), seed).digest()
    )
    monkeypatch.setattr(keys_module, "xxhash", fake)
    monkeypatch.setattr(accel, "native", None)  # the fake hash is Python's; C collisions: test_native.py
    cache = make()
    a, b = list(range(8)), list(range(100, 108))
    put(cache, a)
    assert cache.hasher.keys(a, cache.namespace()) == cache.hasher.keys(b, cache.namespace())  # truly colliding
    m = cache.lookup(b)
    assert m.hit_tokens == 0 and m.payloads == []
    cache.release(m)
    usage = cache.store(b, [b"x", b"y"])
    assert usage.cache_creation_tokens == 0 and cache.stats()["collisions"] == 1
    assert cache.lookup(a).payloads == [payload_for("default", a, i, BS) for i in range(2)]


def test_payload_count_and_first_block_are_checked():
    cache = make()
    with pytest.raises(PayloadError, match="got 1 payloads for blocks 0..1"):
        cache.store(list(range(8)), [b"x"])
    with pytest.raises(ValueError, match="first_block"):
        cache.store(list(range(8)), [], first_block=3)
    with pytest.raises(PayloadError, match="sequence"):
        cache.store(list(range(8)), b"xy")
    assert cache.stats()["blocks"] == 0


def test_bad_payload_stores_nothing():
    cache = make()
    with pytest.raises(PayloadError, match="cannot size"):
        cache.store(list(range(12)), [b"a", b"b", object()])
    assert cache.stats()["blocks"] == 0


def test_block_larger_than_capacity_is_refused_with_a_clear_error():
    cache = make(capacity=64)
    with pytest.raises(PayloadError, match="smaller than one block"):
        cache.store(list(range(4)), [bytes(65)])


def test_store_without_cached_parent_stores_nothing():
    cache = make()
    usage = cache.store(list(range(12)), [b"c"], first_block=2)
    assert usage.cache_creation_tokens == 0 and cache.stats()["blocks"] == 0


def test_watermark_eviction_goes_down_to_low():
    cache = make(capacity=1000, high=0.85, low=0.5)
    for p in range(9):  # 9 one-block prompts of 100 B: 900 B > 850 B -> evict to <= 500 B
        put(cache, [p * 10 + i for i in range(BS)], size=100)
    s = cache.stats()
    assert s["bytes"] <= 500 and s["evictions"] == 4
    # LRU: the oldest prompts went.
    assert cache.lookup([0, 1, 2, 3]).hit_tokens == 0
    assert cache.lookup([80, 81, 82, 83]).hit_tokens == 4


def test_parents_outlive_children_under_eviction():
    cache = make(capacity=1000, high=1.0, low=1.0)
    put(cache, list(range(40)), size=100)  # a chain of 10 blocks fills the cache exactly
    put(cache, [7] * 8, size=100)  # 2 more blocks need room
    # Evicting must take the chain's leaves, so its first 8 blocks are still a hittable prefix.
    assert cache.lookup(list(range(40))).hit_tokens == 32
    assert cache.stats()["bytes"] <= 1000


def test_pinned_blocks_survive_eviction_and_store_gives_up_cleanly():
    cache = make(capacity=400, high=1.0, low=1.0)
    put(cache, list(range(16)), size=100)  # 4 blocks: full
    m = cache.lookup(list(range(16)))
    usage = cache.store([9] * 8, [bytes(100)] * 2)
    assert usage.cache_creation_tokens == 0 and cache.stats()["rejected"] == 2
    with cache.lookup(list(range(16))) as again:
        assert again.payloads == m.payloads
    cache.release(m)
    assert cache.store([9] * 8, [bytes(100)] * 2).cache_creation_tokens == 8


def test_two_tiers_demote_then_evict():
    cache = make(tiers=[
        {"kind": "memory", "capacity": 200, "high": 1.0, "low": 1.0, "name": "hot"},
        {"kind": "memory", "capacity": 300, "high": 1.0, "low": 1.0, "name": "warm"},
    ])  # fmt: skip
    for p in range(6):
        put(cache, [p] * BS, size=100)
    s = cache.stats()
    assert s["tiers"]["hot"]["blocks"] == 2 and s["tiers"]["warm"]["blocks"] == 3
    assert s["demotions"] == 4 and s["evictions"] == 1
    m = cache.lookup([1] * BS)
    assert m.hit_tokens == 4 and m.usage.by_tier == {"warm": 4}
    assert cache.lookup([0] * BS).hit_tokens == 0


def test_evict_all_spares_pinned():
    cache = make()
    put(cache, list(range(8)))
    m = cache.lookup(list(range(4)))
    put(cache, [5] * 8)
    assert cache.evict_all() == 3
    assert cache.stats()["blocks"] == 1
    cache.release(m)


def test_numpy_and_list_tokens_hit_the_same_blocks():
    cache = make()
    put(cache, list(range(12)))
    assert cache.lookup(np.arange(12, dtype=np.int64)).hit_tokens == 12


def test_context_manager_closes():
    with make() as cache:
        put(cache, list(range(4)))
    assert cache.stats()["blocks"] == 1


def test_concurrent_use_keeps_invariants():
    cache = make(capacity=3000, high=0.9, low=0.6)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(300):
                shared = [1, 2, 3, 4, 5, 6, 7, 8]
                toks = shared + rng.integers(0, 5, size=int(rng.integers(0, 12))).tolist()
                ns = f"t{int(rng.integers(0, 2))}"
                with cache.lookup(toks, ns) as m:
                    assert m.payloads == [payload_for(ns, toks, i, BS) for i in range(m.n_blocks)]
                    n = len(toks) // BS
                    cache.store(toks, [payload_for(ns, toks, i, BS) for i in range(m.n_blocks, n)], ns, m.n_blocks)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    s = cache.stats()
    assert s["bytes"] <= 3000 and s["lookups"] == 1200
    assert all(n.pins == 0 for n in cache.index)


@pytest.mark.parametrize("disk", [False, True])
def test_bare_numpy_array_payloads_survive_lookup_in_every_path(tmp_path, disk):
    """#12 item 10: ``None in payloads`` compared arrays with ==; the codec refused a bare array."""
    mem = {"kind": "memory", "capacity": 1 << 20}
    tiers = [mem, {"kind": "disk", "capacity": 1 << 20, "path": str(tmp_path)}] if disk else [mem]
    cache = ContextCache.from_config({"block_size": BS, "tiers": tiers})
    toks = list(range(6 * BS))
    cache.store(toks, [np.ones(64, np.float32)] * 6)
    with cache.lookup(toks + [1]) as m:
        assert m.n_blocks == 6 and all(np.array_equal(p, np.ones(64, np.float32)) for p in m.payloads)
    cache.close()
    if disk:  # spilled by close(): a restarted cache reads the bare arrays back from disk
        again = ContextCache.from_config({"block_size": BS, "tiers": tiers})
        with again.lookup(toks + [1]) as m:
            assert m.n_blocks == 6 and all(isinstance(p, np.ndarray) and p.shape == (64,) for p in m.payloads)
        again.close()
