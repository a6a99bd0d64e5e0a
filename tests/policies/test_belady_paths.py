"""Belady (belady.py): without a future, a key looks unused again, so it is the first victim next
to keys whose next use is known; a refused key is set aside with its next use kept."""

from __future__ import annotations

import numpy as np

from ctxcache.index import RadixIndex
from ctxcache.policies import make_policy
from ctxcache.policies.base import as_offline


def test_keys_without_a_known_future_go_before_keys_with_one():
    p = make_policy("belady")
    oracle = as_offline(p)
    assert oracle is not None
    p.on_insert("early")  # inserted before the simulator gave the future: next use unknown
    oracle.set_future(np.array([7, 3, 5]))
    for pos, key in enumerate(["far", "near", "mid"]):
        oracle.position = pos
        p.on_insert(key)
    assert [p.evict() for _ in range(4)] == ["early", "far", "mid", "near"]


def test_without_any_future_the_oldest_key_goes_first():
    p = make_policy("belady")
    for key in "abc":
        p.on_insert(key)
    p.on_hit("a")  # every key looks unused again: ties go to the oldest entry, and a hit renews it
    assert [p.evict() for _ in range(3)] == ["b", "c", "a"]


def test_a_refused_key_is_set_aside_until_the_index_lets_it_go_with_its_next_use_kept():
    # docs/policies.md: a vetoed key is in use. The pinned leaf with the furthest next use is asked
    # once (not on every evict while pinned), and back on the heap with that same next use as soon
    # as the index reports it evictable, so MIN holds over the keys that may go.
    idx = RadixIndex()
    p = make_policy("belady")
    p.attach(idx)
    oracle = as_offline(p)
    assert oracle is not None
    oracle.set_future(np.array([90, 10, 20, 30, 40, 50]))
    for pos, key in enumerate(["far", "k1", "k2", "k3", "k4", "k5"]):
        idx.insert(key, None, b"", 0)
        oracle.position = pos
        p.on_insert(key)
    far = idx.get("far")
    assert far is not None
    idx.pin([far])
    asked: list[str] = []

    def can(key: str) -> bool:
        asked.append(key)
        return idx.is_evictable(key)

    for want in ["k5", "k4", "k3"]:
        assert p.peek(idx.is_evictable) == want
        assert p.evict(can) == want
        idx.remove(want)
    assert asked.count("far") == 1
    idx.unpin([far])
    assert p.peek(idx.is_evictable) == "far" == p.evict(can)


def test_without_an_index_keys_set_aside_come_back_when_nothing_else_may_go():
    p = make_policy("belady")
    for key in "abcd":
        p.on_insert(key)  # no future: oldest first
    assert p.evict(lambda k: k not in "ab") == "c"
    assert p.peek() == "a" == p.evict()  # no veto: every key set aside is a candidate again
    assert p.peek(lambda k: k == "b") == "b" == p.evict(lambda k: k == "b")
    assert p.evict() == "d" and p.evict() is None
