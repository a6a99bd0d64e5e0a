"""Behaviour specific to lru, fifo, lfu and lfu-decay."""

from __future__ import annotations

import math

from ctxcache.policies import make_policy

from ..conftest import FakeClock
from .helpers import drain


def test_lru_evicts_least_recently_used():
    p = make_policy("lru")
    for k in "abcd":
        p.on_insert(k)
    p.on_hit("a")
    p.on_hit("c")
    assert drain(p) == ["b", "d", "a", "c"]


def test_fifo_ignores_hits():
    p = make_policy("fifo")
    for k in "abcd":
        p.on_insert(k)
    p.on_hit("a")
    assert drain(p) == ["a", "b", "c", "d"]


def test_lfu_evicts_fewest_uses_then_least_recent():
    p = make_policy("lfu")
    for k in "abcd":
        p.on_insert(k)
    for k in "aabbbc":
        p.on_hit(k)
    # d:1, c:2, a:3, b:4
    assert drain(p) == ["d", "c", "a", "b"]
    for k in "xy":
        p.on_insert(k)
    assert p.evict() == "x"  # tie on count: the older one goes


def test_lfu_decay_prefers_recent_over_stale_popular():
    clock = FakeClock()
    p = make_policy({"name": "lfu-decay", "decay": math.log(2) / 10}, clock=clock)  # half-life 10 s
    p.on_insert("old")
    for _ in range(7):
        p.on_hit("old")  # 8 uses at t=0
    clock.advance(40)  # worth 8/16 = 0.5 now
    p.on_insert("new")  # 1 use at t=40
    assert math.isclose(p.value("old"), 0.5)
    assert p.evict() == "old"
    # Without decay it behaves like LFU.
    q = make_policy({"name": "lfu-decay", "decay": 0.0}, clock=clock)
    q.on_insert("old")
    for _ in range(7):
        q.on_hit("old")
    clock.advance(40)
    q.on_insert("new")
    assert q.evict() == "new"


def test_lfu_decay_accumulates_decayed_hits():
    clock = FakeClock()
    p = make_policy({"name": "lfu-decay", "decay": math.log(2) / 10}, clock=clock)
    p.on_insert("k")
    clock.advance(10)
    p.on_hit("k")
    assert math.isclose(p.value("k"), 1.5)


def test_lfu_buckets_stay_consistent_under_churn():
    p = make_policy("lfu", clock=FakeClock())
    for k in range(100):
        p.on_insert(k)
        for _ in range(k % 7):
            p.on_hit(k)
    for k in range(0, 100, 3):
        p.on_remove(k)
    counts = {k: k % 7 + 1 for k in range(100) if k % 3}
    order = [p.evict() for _ in range(len(counts))]
    assert sorted(order) == sorted(counts)
    assert [counts[k] for k in order] == sorted(counts.values())  # fewest uses first
    assert p.evict() is None and p._buckets == {}


def test_lfu_decay_rebases_its_epoch_without_changing_order_or_values():
    clock = FakeClock()
    p = make_policy({"name": "lfu-decay", "decay": 0.5}, clock=clock)
    p.on_insert("a")
    p.on_hit("a")  # 2 uses at t=0
    clock.advance(10.0)
    p.on_insert("b")  # 1 use at t=10: worth e^5 / 2 = 74x "a" from now on
    clock.advance(1300.0)  # decay * dt = 650 > 600: the epoch moves
    p.on_insert("c")
    assert p._t0 == clock.t
    assert math.isclose(p.value("c"), 1.0)
    assert 0.0 < p.value("a") < p.value("b")
    assert math.isclose(p.value("b") / p.value("a"), math.exp(5) / 2, rel_tol=1e-9)
    assert [p.evict(), p.evict(), p.evict()] == ["a", "b", "c"]


def test_scored_heap_stays_compact():
    p = make_policy("lfu-decay", clock=FakeClock())
    p.on_insert(1)
    for _ in range(10_000):
        p.on_hit(1)
    assert len(p._heap) < 200


def test_lfu_decay_counts_a_refusal_as_a_use():
    # docs/policies.md: a vetoed key is in use. Refused at t = 10, "a" gains a use then, as a hit
    # would give it, and goes behind the keys it tied with instead of heading the heap again.
    clock = FakeClock()
    p = make_policy({"name": "lfu-decay", "decay": math.log(2) / 10}, clock=clock)
    for k in "abc":
        p.on_insert(k)
    clock.advance(10)
    assert p.evict(lambda k: k != "a") == "b"
    assert math.isclose(p.value("a"), 1.5) and math.isclose(p.value("c"), 0.5)
    assert p.peek(lambda k: k != "a") == "c"  # peek only looks: no second use for "a"
    assert math.isclose(p.value("a"), 1.5)
    assert drain(p) == ["c", "a"]
