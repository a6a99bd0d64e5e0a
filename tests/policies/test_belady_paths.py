"""Belady (belady.py): without a future, a key looks unused again, so it is the first victim next
to keys whose next use is known."""

from __future__ import annotations

import numpy as np

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
