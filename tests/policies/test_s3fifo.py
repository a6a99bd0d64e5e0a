"""S3-FIFO: small/main/ghost queues, libCacheSim's quirks, refusals, and agreement with libCacheSim."""

from __future__ import annotations

import random

import pytest

from ctxcache.errors import ConfigError
from ctxcache.policies import make_policy
from ctxcache.policies.s3fifo import S3FIFO
from ctxcache.sim.simulator import simulate

# libcachesim 0.3.5 (/tmp/lcs/.venv), lcs.S3FIFO(cache_size=C, hashpower=16) with its defaults
# (small 0.1, ghost 0.9, threshold 2), one cache.get() per block id (obj_size 1) over the flattened
# hash_ids of the first 3000 requests of the Mooncake conversation trace: 80619 accesses, 55287
# unique ids, C = round(f * unique) for f = 1/5/10/20%.
LCS_MISSES = {553: 76974, 2764: 72915, 5529: 68241, 11057: 64917}


def filled(capacity=20):
    p = S3FIFO(capacity=capacity)  # C = 20: small 2, main 18, ghost 18
    for k in range(capacity):
        p.on_insert(k)
    return p


def test_one_hit_wonders_leave_through_small_to_the_ghost_and_a_ghost_hit_enters_main():
    p = filled()
    # Until the first eviction, keys go to main once small is full (libCacheSim's warm start).
    assert [p.queue_of(k) for k in (0, 1, 2, 19)] == ["small", "small", "main", "main"]
    assert p.evict() == 0
    assert p.queue_of(0) == "ghost" and 0 not in p
    p.on_insert(100)
    assert p.queue_of(100) == "small"  # after the first eviction new keys go to small
    assert p.evict() == 1  # main holds M = 18 keys: small goes first
    p.on_insert(0)
    assert p.queue_of(0) == "main"  # remembered by the ghost: straight to main
    assert p.evict() == 2  # main is over M now: its unhit head leaves, and not to the ghost
    assert p.queue_of(2) is None


def test_two_hits_in_small_promote_to_main_one_does_not():
    p = filled()
    p.on_hit(0)
    p.on_hit(0)
    p.on_hit(1)
    assert p.evict() == 1  # 0 moved to main (freq reset), 1 had a single hit
    assert p.queue_of(0) == "main" and p.queue_of(1) == "ghost"


def test_main_is_a_clock_with_frequency_capped_at_three():
    p = filled()
    p.on_remove(0)
    p.on_remove(1)  # small is empty: evictions come from main
    for _ in range(10):
        p.on_hit(2)
    for _ in range(4):
        p.on_hit(5)
    out = []
    while (k := p.evict()) is not None:
        out.append(k)
    # Both survive three rounds (freq 10 and 4 are capped to 3): 2 stays ahead of 5. Uncapped,
    # 5 would run out first.
    assert out == [3, 4, *range(6, 20), 2, 5]


def test_refused_keys_are_treated_as_in_use_and_refusing_all_gives_none():
    p = filled()
    assert p.evict(lambda k: k != 0) == 1
    assert p.queue_of(0) == "main"  # in use: promoted, so later calls do not rescan it in small
    assert p.evict(lambda k: False) is None and len(p) == 19
    # Only main keys allowed: small has none, so main gives one.
    assert p.evict(lambda k: k >= 10) == 10


def test_many_refusals_cost_amortised_constant():
    p = S3FIFO(capacity=2000)
    for k in range(2000):
        p.on_insert(k)
    calls = 0

    def allowed(k):
        nonlocal calls
        calls += 1
        return k % 20 != 0

    out = [p.evict(allowed) for _ in range(1900)]
    assert len(set(out)) == 1900 and all(k % 20 for k in out)
    assert calls < 4 * 2000


def test_peek_agrees_with_evict_and_changes_nothing():
    rng = random.Random(3)
    p = S3FIFO(capacity=50)
    nxt = 0
    for _ in range(2000):
        if len(p) < 50:
            p.on_insert(nxt)
            nxt += 1
        elif rng.random() < 0.5:
            p.on_hit(rng.choice(list(p._freq)))
        else:
            banned = set(rng.sample(range(nxt), nxt // 3))

            def can(k, banned=banned):
                return k not in banned

            state = (list(p._small), list(p._main), list(p._ghost), dict(p._freq))
            want = p.peek(can)
            assert (list(p._small), list(p._main), list(p._ghost), dict(p._freq)) == state
            assert p.evict(can) == want


def test_without_capacity_queues_follow_the_resident_count():
    p = make_policy("s3fifo")
    for k in "abc":
        p.on_insert(k)
    p.on_hit("a")
    p.on_hit("a")
    assert p.evict() == "b"
    assert p.queue_of("a") == "main"


def test_params_and_validation():
    assert S3FIFO(capacity=10).params()["small_ratio"] == 0.1
    with pytest.raises(ConfigError):
        S3FIFO(capacity=10, small_ratio=1.5)


@pytest.mark.parametrize("capacity", sorted(LCS_MISSES))
def test_matches_libcachesim_on_the_trace_head(trace_head, capacity):
    assert trace_head.stream.size == 80619 and trace_head.unique_blocks == 55287
    r = simulate(trace_head, S3FIFO(capacity=capacity), capacity, semantics="object")
    assert r.misses == LCS_MISSES[capacity]
