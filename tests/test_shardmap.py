"""The structures that keep the store path free of O(n) steps (issue 15): ShardedDict behaves as a
dict, spreads keys so no shard holds much more than its share, and the index's nodes are invisible
to the cyclic GC and fully released when they leave."""

from __future__ import annotations

import gc
import inspect
import os
import random
import re
import sys
from collections import Counter
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcache import ContextCache, accel
from ctxcache.index import RadixIndex
from ctxcache.shardmap import NSHARDS, ORDER_SHARDS, SELECTORS, ShardedDict

KEYS = st.one_of(
    st.binary(max_size=20), st.text(max_size=4), st.integers(-(2**70), 2**70), st.tuples(st.integers(), st.binary())
)
OPS = st.lists(st.tuples(st.sampled_from(["set", "del", "pop", "get", "in", "setdefault"]), KEYS, st.integers()))


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from(sorted(SELECTORS)))
def test_sharded_dict_behaves_as_a_dict(ops, owner):
    ref: dict[object, int] = {}
    got: ShardedDict[object, int] = ShardedDict(SELECTORS[owner])
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


# Each owner's selector: the index reads a bytes key's last byte (else ``hash % 251``); the others
# take ``hash(key) % p``, a prime each.
PRIMES = {"index": 251, "tier": 241, "owners": 239, "order": 1021}


@given(KEYS)
def test_every_key_has_one_shard_in_range_for_every_owner(key):
    for owner, prime in PRIMES.items():
        s = SELECTORS[owner](key)
        assert 0 <= s < (ORDER_SHARDS if owner == "order" else NSHARDS) and s == SELECTORS[owner](key)
        want = key[-1] if owner == "index" and isinstance(key, bytes) and key else hash(key) % prime
        assert s == want, owner  # the expression its hot paths inline


def test_keys_spread_evenly_over_shards():
    """A resize copies one shard: that is only small if no shard holds far more than its share."""
    for pick in SELECTORS.values():
        for keys in ([os.urandom(16) for _ in range(40_000)], list(range(40_000)), [f"k{i}" for i in range(40_000)]):
            d: ShardedDict[object, None] = ShardedDict(pick)
            for k in keys:
                d[k] = None
            sizes = sorted(len(s) for s in d.shards if s)
            mean = len(keys) / len(sizes)
            # 2x the mean; the order's 1,024 shards hold ~40 keys each here: 6 standard deviations
            assert sizes[-1] <= max(2 * mean, mean + 6 * mean**0.5), sizes[-5:]
            assert len(sizes) >= min(233, len(d.shards) * 0.9)  # every shard (bytes keys: all) is used


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
    maps = e.index.shards + order_shards(e.slots[0].policy) + e.slots[0].owners.shards + e.tiers[0]._data.shards
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
    assert all(not s for s in tier._sizes.shards) and all(not od for od in order_shards(slot.policy))
    assert len(getattr(slot.policy, "_heap", ())) <= ORDER_SHARDS  # at most one entry per shard, never one per key


# The module whose hot paths inline each owner's selector (it owns that map, or walks it).
INLINED = {
    "index.py": "index",
    "keys.py": "index",  # the lookup walk over the index's shards: its keys are bytes, so the byte alone
    "memory.py": "tier",
    "slot.py": "owners",
    "base.py": "order",
    "lru.py": "order",
    "watch.py": "index owners",  # events' store-run resolver reads the index's nodes and a slot's owners
}
# Anything that looks like a copy of a selector: a guarded byte, a hash modulo, a shard list by a byte.
CANDIDATE = re.compile(r"__class__ is bytes and|hash\([\w.]+\) % \d|shards\[[\w.]+\[-\d\]\]")


def _selector_pattern(owner: str) -> re.Pattern[str]:
    """The selector's body as a regex, its argument renamed (``key``, ``k``, ``node.parent``...)."""
    body = inspect.getsource(SELECTORS[owner]).split("return ", 1)[1].split("  #")[0].strip()
    first, second, *rest = re.escape(body).split("key")
    return re.compile(first + r"(?P<v>[\w.]+)" + second + "".join(r"(?P=v)" + part for part in rest))


def test_every_inlined_shard_choice_is_its_owners_selector():
    """Hot paths inline their map's selector (a call costs ~5 % of a store); a copy that drifted
    would file keys in one shard and look them up in another, and a copy of another owner's
    selector would bring back resizes of several maps on one insert. Each copy must be the
    expression of the selector its map was built with (checked at run time by the next test)."""
    src = Path(__file__).resolve().parents[1] / "src" / "ctxcache"
    copies: dict[str, int] = {}
    wrong = []
    for p in sorted(src.rglob("*.py")):
        if p.name == "shardmap.py":
            continue
        for line in p.read_text().splitlines():
            if not CANDIDATE.search(line):
                continue
            owners = INLINED.get(p.name, "").split()
            owner = owners[0] if owners else None
            if owner is None:
                wrong.append((p.name, line.strip()))
            elif p.name == "keys.py":
                byte = SELECTORS[owner](bytes(range(1, 17))) - 17  # -1 for the last byte, ...
                if not re.search(rf"shards\[(\w+)\[{byte}\]\]\.get\(\1\)", line):
                    wrong.append((p.name, line.strip()))
            elif not any(_selector_pattern(o).search(line) for o in owners):
                wrong.append((p.name, line.strip()))
            copies[p.name] = copies.get(p.name, 0) + 1
    assert wrong == []
    assert set(copies) == set(INLINED) and sum(copies.values()) >= 20  # every owner still inlines


def order_shards(policy: object) -> list[dict]:
    """The pure-Python LRU/FIFO order's dicts; none when the compiled order runs
    (native/ctxcache_order.c: its own shard tables, keys outside the GC; tests/policies/test_native_order.py)."""
    return getattr(policy, "_shards", [])


def python_cache() -> ContextCache:
    """A cache made with the pure-Python key walk and order (``--no-native``): its order is dicts."""
    accel.use_native(False)
    try:
        return ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "64MiB"}]})
    finally:
        accel.use_native(True)  # back to the compiled module when it is built and not disabled


def _maps(cache: ContextCache) -> dict[str, list]:
    e = cache._engine
    slot = e.slots[0]
    maps = {"index": e.index.shards, "tier": e.tiers[0]._data.shards, "owners": slot.owners.shards}
    return maps | ({"order": order_shards(slot.policy)} if order_shards(slot.policy) else {})


def test_each_map_files_a_key_by_its_own_selector():
    """Inlined writes, generic reads and the selector a map was built with all agree, per map
    (the order's dicts only where the pure-Python order runs)."""
    cache = ContextCache.from_config({"block_size": 4, "tiers": [{"kind": "memory", "capacity": "64MiB"}]})
    toks = list(range(4 * 300))
    cache.store(toks, [b"x"] * 300)
    cache.release(cache.lookup(toks))  # hits: the LRU's inlined on_hits
    e = cache._engine
    keys = [n.key for n in e.index]
    assert len(keys) == 300
    for owner, shards in _maps(cache).items():
        pick = SELECTORS[owner]
        assert all(k in shards[pick(k)] for k in keys), owner
        assert sum(map(len, shards)) == len(keys), owner
    slot, tier = e.slots[0], e.tiers[0]
    assert all(tier._data[k] == b"x" and slot.owners[k][1] == 1 and k in slot.policy for k in keys)
    assert all(e.index.get(k) is not None and k in tier for k in keys)
    # One key, four maps, four different shards (for most keys: their bytes are independent).
    assert sum(len({pick(k) for pick in SELECTORS.values()}) == 4 for k in keys) > 0.9 * len(keys)


def test_no_insert_resizes_the_shards_of_two_maps_at_once():
    """The index, the memory tier, the slot and the policy each hold every block. With one selector
    for all, shard ``s`` of each held the same keys and doubled on the same insert: 4-5 resizes in
    one store (10-18 ms of CPU at 2.8 M blocks). With a selector each, resizes fall on different
    inserts: here, of ~3,600 shard resizes in 45,000 inserts, 6-9 % share their insert with
    another map's. Three maps select by ``hash(key)``, which differs per process
    (PYTHONHASHSEED): over 200 seeds, at most 8 inserts touched three maps, and 9 seeds had one
    insert that touched all four (one selector for all: ~500 such inserts). The pure-Python order
    here; the compiled one picks its shard tables by other bits (a mix of the hash's top bits)."""
    cache = python_cache()
    e = cache._engine
    slot, tier, maps = e.slots[0], e.tiers[0], _maps(cache)
    picks = [(SELECTORS[o], maps[o]) for o in ("index", "tier", "owners", "order")]

    def tables(k: bytes) -> list[int]:
        return [sys.getsizeof(m[p(k)]) for p, m in picks]

    rng = random.Random(0)
    together: Counter[int] = Counter()
    for i in range(60_000):
        k = rng.randbytes(16)
        before = tables(k)
        e.index.insert(k, b"root", k, 0)
        tier.put(k, b"x")
        slot.admit(k)
        if i >= 15_000:  # past tables of a few dozen slots, whose thresholds come close together
            together[sum(a != b for a, b in zip(before, tables(k)))] += 1
    resizes = sum(n * c for n, c in together.items())
    shared = sum(n * c for n, c in together.items() if n > 1)
    assert resizes > 1500, together
    # One selector for all: every resize here would be four at once (together[4] ~ 500).
    # (The order's 1,021 shards are small here and resize often, so three maps meet a few times.)
    assert together[4] <= 2 and together[3] <= 0.01 * resizes and shared < 0.15 * resizes, together
