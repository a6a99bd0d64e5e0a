"""The TTL heap (engine/expiry.py) where the engine tests do not reach it: the rebuild that drops
stale entries, the deadline boundary, batches of due blocks, and a sweep that meets a block in use."""

from __future__ import annotations

import random

from ctxcache.engine.expiry import Expiry
from ctxcache.index import Node

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of


def _expected(deadlines: dict[int, float], depth: dict[int, int], now: float) -> list[int]:
    """What due(now) must return: expired keys by deadline, deepest first at equal deadlines."""
    return sorted((k for k, d in deadlines.items() if d <= now), key=lambda k: (deadlines[k], -depth[k]))


def test_refreshes_keep_the_heap_small_and_due_exact():
    """Many refreshes make most entries stale: the heap is rebuilt (its size stays O(n)), and
    due() still returns exactly the expired keys, in deadline order, deepest first at ties."""
    rng = random.Random(17)
    e = Expiry()
    depth = {k: k % 5 for k in range(100)}
    deadlines: dict[int, float] = {}
    for _ in range(20):
        for k in range(100):
            deadlines[k] = float(rng.randrange(50, 150))  # few distinct values: many ties
            e.set(k, deadlines[k], depth[k])
            assert len(e._heap) <= 2 * len(e) + 64
    assert len(e) == 100
    assert e.due(100.0) == _expected(deadlines, depth, 100.0)
    assert e.due(1000.0) == _expected({k: d for k, d in deadlines.items() if d > 100.0}, depth, 1000.0)
    assert e.due(1e9) == []  # each live key popped once, stale entries never


def test_a_rebuild_keeps_every_live_deadline():
    e = Expiry()
    for k in range(40):
        e.set(k, 10.0 + k, depth=0)
    for r in range(3):  # stale entries of keys 0..39 outnumber the live ones: rebuilt
        for k in range(40):
            e.set(k, 100.0 + k + r / 10, depth=0)
    assert len(e._heap) < 4 * 40
    assert e.due(99.0) == [] and e.due(119.5) == list(range(20))
    e.forget(25)
    assert e.due(200.0) == [k for k in range(20, 40) if k != 25]


def test_expired_at_and_after_the_deadline_only():
    e = Expiry()
    e.set("a", 10.0)
    assert not e.expired("a", 9.99) and e.expired("a", 10.0) and e.expired("a", 11.0)
    assert not e.expired("unknown", 1e9)
    e.set("a", 20.0)  # refreshed
    assert not e.expired("a", 10.0)
    e.forget("a")
    e.forget("never set")  # erasure forgets every key it drops, with a TTL or not
    assert not e.expired("a", 1e9) and len(e) == 0


def test_due_pops_at_most_limit_and_keeps_the_rest():
    e = Expiry()
    for k in range(10):
        e.set(k, 5.0, depth=k)
    assert e.due(5.0, limit=3) == [9, 8, 7]  # deepest first: a chain expires from its leaf
    assert e.due(4.0) == []
    assert e.due(5.0, limit=100) == [6, 5, 4, 3, 2, 1, 0]


def test_cut_truncates_a_walked_chain_at_its_first_expired_block():
    e = Expiry()
    chain = [Node(i, i - 1, bytes([i]), i, tag="a") for i in range(4)]
    e.refresh(chain, 5.0)
    assert e.due(5.0) == [3, 2, 1, 0]  # a refreshed chain expires from its leaf
    e.refresh(chain, 50.0)
    e.set(2, 5.0, 2)
    nodes = list(chain)
    e.cut(nodes, 4.0)
    assert nodes == chain
    e.cut(nodes, 5.0)
    assert nodes == chain[:2]


def test_a_sweep_retries_an_expired_block_that_is_in_use(tmp_path, clock, monkeypatch):
    monkeypatch.setattr("ctxcache.engine.core.SWEEP_EVERY_S", 3600.0)  # this test's sweeps only
    cache = cache_with([tier_of("memory", tmp_path)], {"a": {"ttl": "10s"}}, clock=clock)
    p, q = prompt_of(1), prompt_of(2)
    ask(cache, "a", p)
    ask(cache, "a", q)  # expires at t=10
    clock.advance(5)
    m = cache.lookup(cache.prompt(p, "a"))  # a hit at t=5: deadline t=15, held
    assert m.hit_tokens == len(p)
    clock.advance(11)
    assert cache.sweep() == 4  # q's blocks; p's are expired but in use: kept for the next sweep
    assert cache.lookup(cache.prompt(p, "a")).hit_tokens == 0  # expired is a miss meanwhile
    assert cache.sweep() == 0
    cache.release(m)
    assert cache.sweep() == 4 and cache.stats()["expired"] == 8
    assert cache.sweep() == 0 and len(cache.index) == 0
    assert ask(cache, "a", p) == 0 and ask(cache, "a", p) == 4 * BS
