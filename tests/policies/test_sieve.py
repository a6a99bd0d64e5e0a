"""SIEVE: the hand, visited bits, refusals, and agreement with libCacheSim."""

from __future__ import annotations

import random

import pytest

from ctxcache.policies import make_policy
from ctxcache.sim.simulator import simulate

from .helpers import drain

# libcachesim 0.3.5 (/tmp/lcs/.venv), lcs.Sieve(cache_size=C, hashpower=16), one cache.get() per
# block id (obj_size 1) over the flattened hash_ids of the first 3000 requests of the Mooncake
# conversation trace: 80619 accesses, 55287 unique ids, C = round(f * unique) for f = 1/5/10/20%.
LCS_MISSES = {553: 77074, 2764: 75514, 5529: 71024, 11057: 63703}


def test_survivors_keep_their_place_and_the_hand_moves_on():
    p = make_policy("sieve")
    for k in "abc":
        p.on_insert(k)
    p.on_hit("a")
    assert p.evict() == "b"  # a was visited: its bit is cleared, it stays at the tail
    p.on_insert("d")  # new keys enter at the head
    # The hand goes on from b's place to c, then d, and reaches a only after wrapping. LRU and
    # CLOCK would evict a (hit before d was inserted, or moved to the head) before d.
    assert drain(p) == ["c", "d", "a"]


def test_a_hit_after_the_sweep_saves_a_key_again():
    p = make_policy("sieve")
    for k in "abcd":
        p.on_insert(k)
    for k in "abcd":
        p.on_hit(k)
    assert p.evict() == "a"  # a full round clears every bit, then the tail goes
    p.on_hit("c")
    assert drain(p) == ["b", "d", "c"]


def test_a_key_inserted_after_a_wrap_waits_for_the_older_keys():
    p = make_policy("sieve")
    for k in "ab":
        p.on_insert(k)
    p.on_hit("a")
    assert p.evict() == "b"  # the hand passed the head: it wraps to a
    p.on_insert("c")
    assert p.evict() == "a"


def test_refused_keys_count_as_visited_and_cost_amortised_constant():
    p = make_policy("sieve")
    for k in range(1000):
        p.on_insert(k)
    calls = 0

    def allowed(k):
        nonlocal calls
        calls += 1
        return k % 10 != 0  # every tenth key is pinned

    out = [p.evict(allowed) for _ in range(900)]
    assert sorted(out) == [k for k in range(1000) if k % 10]
    assert calls < 3 * 1000  # not O(n) per call
    assert p.evict(allowed) is None and len(p) == 100
    assert sorted(drain(p)) == list(range(0, 1000, 10))


def test_peek_agrees_with_evict_under_refusals_and_changes_nothing():
    rng = random.Random(7)
    p = make_policy("sieve")
    next_key = 0
    for _ in range(400):
        if len(p) < 60:
            p.on_insert(next_key)
            next_key += 1
        elif rng.random() < 0.5:
            p.on_hit(rng.choice(list(p._ahead) + list(p._behind)))
        else:
            banned = set(rng.sample(range(next_key), next_key // 2))

            def can(k, banned=banned):
                return k not in banned

            before = (list(p._ahead), list(p._behind), set(p._visited))
            want = p.peek(can)
            assert (list(p._ahead), list(p._behind), set(p._visited)) == before
            assert p.evict(can) == want


def test_on_remove_at_the_hand():
    p = make_policy("sieve")
    for k in "abcd":
        p.on_insert(k)
    p.on_hit("a")
    assert p.evict() == "b"  # hand now at c
    p.on_remove("c")
    p.on_remove("zz")
    assert drain(p) == ["d", "a"]


@pytest.mark.parametrize("capacity", sorted(LCS_MISSES))
def test_matches_libcachesim_on_the_trace_head(trace_head, capacity):
    assert trace_head.stream.size == 80619 and trace_head.unique_blocks == 55287
    r = simulate(trace_head, "sieve", capacity, semantics="object")
    assert r.misses == LCS_MISSES[capacity]
