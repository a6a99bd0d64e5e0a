"""The structures that keep the store path free of O(n) steps (issue 15): ShardedDict behaves as a
dict, spreads keys so no shard holds much more than its share, and the index's nodes are invisible
to the cyclic GC and fully released when they leave."""

from __future__ import annotations

import gc
import os
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcache import ContextCache
from ctxcache.index import RadixIndex
from ctxcache.shardmap import NSHARDS, PRIME, ShardedDict, shard_index

KEYS = st.one_of(
    st.binary(max_size=20), st.text(max_size=4), st.integers(-(2**70), 2**70), st.tuples(st.integers(), st.binary())
)
OPS = st.lists(st.tuples(st.sampled_from(["set", "del", "pop", "get", "in", "setdefault"]), KEYS, st.integers()))


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_sharded_dict_behaves_as_a_dict(ops):
    ref: dict[object, int] = {}
    got: ShardedDict[object, int] = ShardedDict()
    for op, key, value in ops:
        if op == "set":
            ref[key] = got[key] = value
        elif op == "del" and key in ref:
            del ref[key], got[key]
        elif op == "pop":
            assert got.pop(key, None) == ref.pop(key, None)
        elif op == "get":
            assert got.get(key) == ref.get(key)
        elif op == "in":
            assert (key in got) == (key in ref)
        else:
            assert got.setdefault(key, value) == ref.setdefault(key, value)
    assert len(got) == len(ref) and dict(got.items()) == ref and set(got) == set(ref)


@given(KEYS)
def test_every_key_has_one_shard_in_range(key):
    s = shard_index(key)
    assert 0 <= s < NSHARDS and s == shard_index(key)
    want = key[-1] if isinstance(key, bytes) and key else hash(key) % PRIME
    assert s == want  # the expression hot paths inline


def test_keys_spread_evenly_over_shards():
    """A resize copies one shard: that is only small if no shard holds far more than its share."""
    for keys in ([os.urandom(16) for _ in range(40_000)], list(range(40_000)), [f"k{i}" for i in range(40_000)]):
        d: ShardedDict[object, None] = ShardedDict()
        for k in keys:
            d[k] = None
        sizes = sorted(len(s) for s in d.shards if s)
        assert sizes[-1] <= 2 * len(keys) / len(sizes), sizes[-5:]
        assert len(sizes) >= PRIME  # every shard (bytes keys: all 256) is used


def _chain(idx: RadixIndex, n: int) -> list[bytes]:
    keys = [os.urandom(16) for _ in range(n)]
    for depth, k in enumerate(keys):
        idx.insert(k, keys[depth - 1] if depth else b"root", k * 4, depth % 256 if depth else 0)
    return keys


def test_index_nodes_are_not_tracked_by_the_cyclic_gc():
    """Each tracked node is rescanned by every full collection: 0.2-0.4 s pauses at 1 M blocks."""
    idx = RadixIndex()
    keys = [os.urandom(16) for _ in range(10_000)]
    for k in keys[:5000]:  # every shard in use: their dicts are tracked once, not per block
        idx.insert(k, b"root", k, 0)
    gc.collect()
    before = len(gc.get_objects())
    for k in keys[5000:]:
        idx.insert(k, b"root", k, 0)
    assert not any(gc.is_tracked(idx.get(k)) for k in keys)
    # One tracked object per block would add >= 3000; other tests' background threads (Redis
    # reconnects) may add a few hundred meanwhile, so the margin is far from both.
    assert len(gc.get_objects()) - before < 1000


def test_cache_store_path_adds_no_gc_tracked_objects_per_block():
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "64MiB"}]})
    toks = list(range(4 * 6000))
    cache.store(toks[: 4 * 3000], [b"x"] * 3000)  # every shard in use (tracked once, not per block)
    gc.collect()
    before = len(gc.get_objects())
    cache.store(toks, [b"x"] * 3000, first_block=3000)
    gc.collect()
    assert len(cache._engine.index) == 6000
    # One tracked object per block would add >= 3000; other tests' background threads (Redis
    # reconnects) may add a few hundred meanwhile, so the margin is far from both.
    assert len(gc.get_objects()) - before < 1000
    # Nor a big tracked container: each full collection would read every entry (0.5 s at 7 M).
    e = cache._engine
    maps = e.index.shards + e.slots[0].policy._shards + e.slots[0].owners.shards + e.tiers[0]._data.shards
    assert not any(gc.is_tracked(m) for m in maps)


def test_removed_nodes_are_released_and_maps_emptied():
    """Nothing the index, the tier, the slot or the policy kept for a block outlives it."""
    idx = RadixIndex()
    keys = _chain(idx, 300)
    nodes = [idx.get(k) for k in keys]
    for k in reversed(keys):
        idx.remove(k)
    assert len(idx) == 0 and all(not s for s in idx.shards)
    assert all(sys.getrefcount(n) == 3 for n in nodes)  # the list, the loop name, the argument
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "64MiB"}]})
    for i in range(200):
        cache.store([i, 1, 2, 3, 4, 5, 6, 7], [b"a", b"b"])
    e = cache._engine
    assert cache.evict_all() == 400
    slot, tier = e.slots[0], e.tiers[0]
    assert len(e.index) == 0 and len(tier) == 0 and len(slot.owners) == 0 and len(slot.policy) == 0
    assert tier.used_bytes == 0 and slot.by_tenant == {}
    assert all(not s for s in tier._sizes.shards) and all(not od for od in slot.policy._shards)
    assert len(slot.policy._heap) <= NSHARDS  # at most one entry per shard, never one per key


def test_every_inlined_shard_choice_is_shard_index():
    """Hot paths inline ``shard_index`` (a call costs ~5 % of a store); a copy that drifted would file
    keys in one shard and look them up in another. Each copy must be the same expression."""
    import re
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "src" / "ctxcache"
    name = r"([\w.]+)"
    same = re.compile(rf"{name}\[-1\] if \1\.__class__ is bytes and \1 else hash\(\1\) % PRIME")
    uses = [
        (p, line)
        for p in src.rglob("*.py")
        for line in p.read_text().splitlines()
        if "% PRIME" in line or ("__class__ is bytes" in line and "[-1]" in line)
    ]
    assert len(uses) >= 15  # index, memory tier, slot, policies
    assert [(p.name, line.strip()) for p, line in uses if not same.search(line)] == []
