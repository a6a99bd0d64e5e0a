from __future__ import annotations

import pytest

from ctxcache.index import RadixIndex

ROOT = b"root"


def chain(idx: RadixIndex, keys: list[str], parent: object = ROOT) -> None:
    for depth, k in enumerate(keys):
        idx.insert(k, parent if depth == 0 else keys[depth - 1], k.encode(), depth)


def test_match_returns_longest_verified_prefix():
    idx = RadixIndex()
    chain(idx, ["a", "b", "c"])
    got = idx.match(zip(["a", "b", "x", "c"], [b"a", b"b", b"x", b"c"]))
    assert [n.key for n in got] == ["a", "b"]
    # Same key but other token bytes (a collision) is a miss.
    assert [n.key for n in idx.match(zip(["a", "b"], [b"a", b"B"]))] == ["a"]


def test_evictable_leaves_are_maintained_incrementally():
    idx = RadixIndex()
    chain(idx, ["a", "b", "c"])
    idx.insert("d", "b", b"d", 2)  # sibling of c
    assert set(idx.evictable()) == {"c", "d"}
    idx.remove("c")
    assert set(idx.evictable()) == {"d"}
    idx.remove("d")
    assert set(idx.evictable()) == {"b"}


def test_parent_never_removed_before_children():
    idx = RadixIndex()
    chain(idx, ["a", "b"])
    with pytest.raises(ValueError, match="unpinned leaves"):
        idx.remove("a")


def test_pins_are_refcounts_and_protect_ancestors():
    idx = RadixIndex()
    chain(idx, ["a", "b", "c"])
    nodes = idx.match(zip(["a", "b", "c"], [b"a", b"b", b"c"]))
    idx.pin(nodes)
    idx.pin(nodes[-1:])
    assert idx.evictable() == []
    with pytest.raises(ValueError):
        idx.remove("c")
    idx.unpin(nodes)
    assert idx.evictable() == []  # c still pinned once
    idx.unpin(nodes[-1:])
    assert idx.evictable() == ["c"]
    with pytest.raises(ValueError, match="not pinned"):
        idx.unpin(nodes[-1:])


def test_insert_needs_parent_and_rejects_duplicates():
    idx = RadixIndex()
    with pytest.raises(KeyError, match="parent"):
        idx.insert("b", "a", b"b", 1)
    idx.insert("a", ROOT, b"a", 0)
    with pytest.raises(KeyError, match="already"):
        idx.insert("a", ROOT, b"a", 0)


def test_chain_walks_to_the_root():
    idx = RadixIndex()
    chain(idx, ["a", "b", "c"])
    assert [n.key for n in idx.chain("c")] == ["a", "b", "c"]
    assert idx.get("c").parent == "b" and idx.get("a").parent == ROOT


def test_watchers_see_every_evictable_transition():
    idx = RadixIndex()
    seen: dict[object, bool] = {}
    idx.watch(lambda k, ev: seen.__setitem__(k, ev))
    chain(idx, ["a", "b"])
    assert seen == {"a": False, "b": True}
    idx.pin([idx.get("b")])
    assert seen["b"] is False
    idx.unpin([idx.get("b")])
    assert seen["b"] is True
    idx.remove("b")
    assert seen == {"a": True, "b": False}
    # The watcher's view always equals the index's own evictable set.
    idx.insert("c", "a", b"c", 1)
    assert {k for k, ev in seen.items() if ev} == set(idx.evictable())


def test_watchers_hear_only_real_transitions():
    """A watcher is told when a block enters or leaves the evictable set, once; pinning a block
    that already was not evictable (pinned twice, or an inner node) is not a transition."""
    idx = RadixIndex()
    events: list[tuple[object, bool]] = []
    idx.watch(lambda k, ev: events.append((k, ev)))
    chain(idx, ["a", "b"])
    events.clear()
    idx.pin([idx.get("b")])
    idx.pin([idx.get("b"), idx.get("a")])
    assert events == [("b", False)]
    idx.unpin([idx.get("b"), idx.get("a")])
    idx.unpin([idx.get("b")])
    assert events == [("b", False), ("b", True)]
    idx.pin([idx.get("b")])  # evictable again, so pinning it again is a transition again
    assert events[2:] == [("b", False)]
    idx.insert("c", "a", b"c", 1)  # a second child: "a" was not evictable before either
    assert events[3:] == [("c", True)]


def test_membership():
    idx = RadixIndex()
    chain(idx, ["a"])
    assert "a" in idx and "b" not in idx and len(idx) == 1
