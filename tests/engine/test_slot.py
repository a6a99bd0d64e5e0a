"""Slot: a tier's limits, policy and counters; the only place its accounting changes."""

from __future__ import annotations

from ctxcache.engine import Slot
from ctxcache.policies import make_policy
from ctxcache.tiers import MemoryTier


def test_watermarks():  # moved from tests/tiers/test_memory.py: the slot owns the limits now
    t = MemoryTier(1000, high=0.8, low=0.5)
    s = Slot(0, t, make_policy("lru"))
    t.put("a", bytes(800))
    assert not s.over_high()
    t.put("b", bytes(1))
    assert s.over_high() == 301  # bytes to free to come back down to the low watermark
    assert s.free() == 199


def test_queued_moves_count_at_once():
    t = MemoryTier(1000)
    s = Slot(0, t, make_policy("lru"))
    s.reserve(300, 0)  # a write queued into the tier
    s.reserve(0, 100)  # a block queued to leave it
    assert s.used() == 200 and s.free() == 800
    s.reserve(-300, -100)  # both landed
    assert s.used() == 0


def test_policy_events_and_counters_go_through_the_slot():
    s = Slot(0, MemoryTier(1000), make_policy("lru"))
    for k in "abc":
        s.admit(k)
    s.touch(["a"])  # a is now the most recent
    assert s.hits == 1 and s.holds("b")
    assert s.victim(lambda k: True) == "b"
    s.evicted("b")
    s.drop("c")
    assert not s.holds("c") and s.evictions == 1
    st = s.stats()
    assert st["policy"] == "lru" and st["hits"] == 1 and st["evictions"] == 1 and st["capacity"] == 1000
