"""RadixIndex with every kind of key it serves: 16-byte block keys (the engine), ints (the trace
simulator and replay) and other hashables. Each method must find a node in the shard that insert
put it in; a method that picks another shard answers "absent" for a block that is there."""

from __future__ import annotations

import gc
import hashlib
import platform

import pytest

from ctxcache.index import RadixIndex


def block_keys(n: int) -> list[object]:
    return [hashlib.blake2b(b"%d" % i, digest_size=16).digest() for i in range(n)]


KINDS = {
    "bytes": block_keys,
    "int": lambda n: list(range(1000, 1000 + 7 * n, 7)),
    "str": lambda n: [f"block-{i}" for i in range(n)],
    "tuple": lambda n: [("t", i) for i in range(n)],
}


def chained(keys: list[object]) -> RadixIndex:
    idx = RadixIndex()
    for depth, k in enumerate(keys):
        idx.insert(k, b"root" if depth == 0 else keys[depth - 1], b"tok%d" % depth, depth)
    return idx


@pytest.mark.parametrize("kind", KINDS)
def test_every_method_finds_what_insert_stored(kind):
    keys = KINDS[kind](6)
    idx = chained(keys)
    assert all(k in idx for k in keys) and len(idx) == 6
    assert not any(k in idx for k in KINDS[kind](12)[6:])
    chain = [(k, b"tok%d" % d) for d, k in enumerate(keys)]
    assert [n.key for n in idx.match(chain)] == keys
    leaf, inner = keys[-1], keys[:-1]
    assert idx.is_evictable(leaf) and not any(idx.is_evictable(k) for k in inner)
    assert all(idx.is_unpinned(k) for k in keys)
    idx.pin([idx.get(leaf)])
    assert not idx.is_evictable(leaf) and not idx.is_unpinned(leaf)
    absent = KINDS[kind](7)[-1]
    assert not idx.is_evictable(absent) and not idx.is_unpinned(absent)


@pytest.mark.parametrize("kind", KINDS)
def test_watchers_hear_pins_of_every_key_kind(kind):
    # pin/unpin tell watchers only about a node that is indexed (found in its own shard).
    keys = KINDS[kind](4)
    idx = chained(keys)
    events: list[tuple[object, bool]] = []
    idx.watch(lambda k, ev: events.append((k, ev)))
    leaf = idx.get(keys[-1])
    idx.pin([leaf])
    idx.unpin([leaf])
    assert events == [(keys[-1], False), (keys[-1], True)]


def test_len_counts_inserts_and_removals():
    keys = block_keys(5)
    idx = chained(keys)
    for n, k in enumerate(reversed(keys)):
        assert len(idx) == 5 - n
        idx.remove(k)
    assert len(idx) == 0 and list(idx) == []


def test_a_parent_becomes_evictable_only_when_its_last_child_leaves_and_it_is_unpinned():
    idx = RadixIndex()
    events: list[tuple[object, bool]] = []
    idx.watch(lambda k, ev: events.append((k, ev)))
    idx.insert("a", b"root", b"a", 0)
    idx.insert("b", "a", b"b", 1)
    idx.insert("c", "a", b"c", 1)
    events.clear()
    idx.remove("b")  # "a" still has "c"
    assert events == [("b", False)]
    idx.pin([idx.get("a")])
    idx.remove("c")  # "a" is childless now, but pinned
    assert events == [("b", False), ("c", False)]
    assert {k for k, ev in events if ev} == set(idx.evictable())
    idx.unpin([idx.get("a")])
    assert events[-1] == ("a", True) and idx.evictable() == ["a"]


def test_insert_keeps_the_tag():
    # The engine tags each node with its tenant: quotas, erasure and sealing read it back.
    idx = RadixIndex()
    node = idx.insert(b"k" * 16, b"root", b"t", 0, tag="tenant-a")
    assert node.tag == "tenant-a" and idx.get(b"k" * 16).tag == "tenant-a"
    assert idx.insert(b"j" * 16, b"root", b"t", 0).tag is None


@pytest.mark.skipif(platform.python_implementation() != "CPython", reason="CPython's cyclic GC")
def test_nodes_and_their_maps_stay_invisible_to_the_cyclic_gc():
    # Index docstring: at millions of blocks a tracked node or node map costs each full
    # collection hundreds of milliseconds.
    idx = RadixIndex()
    keys = block_keys(300)
    for k in keys:
        idx.insert(k, b"root", b"t", 0, tag="tenant")
    assert not any(gc.is_tracked(n) for n in idx)
    assert not any(gc.is_tracked(shard) for shard in idx.shards)
