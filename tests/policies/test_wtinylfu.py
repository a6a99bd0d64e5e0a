"""W-TinyLFU: admission, SLRU, sketch, doorkeeper, refusals, and agreement with libCacheSim."""

from __future__ import annotations

import random

import numpy as np
import pytest
import xxhash

from ctxcache.errors import ConfigError
from ctxcache.policies import make_policy
from ctxcache.policies.wtinylfu import WTinyLFU, xxh64_u64
from ctxcache.sim.simulator import simulate

# libcachesim 0.3.5 (/tmp/lcs/.venv), lcs.WTinyLFU(cache_size=C, hashpower=16) with its defaults
# (window 0.01, main SLRU), one cache.get() per block id (obj_size 1) over the flattened hash_ids
# of the first 3000 requests of the Mooncake conversation trace: 80619 accesses, 55287 unique ids,
# C = round(f * unique) for f = 1/5/10/20%.
LCS_MISSES = {553: 76620, 2764: 72926, 5529: 70245, 11057: 66483}


def warm(capacity=100):
    """C = 100: window 1, main 99 (probation 19 + protected 79 = 98: one short, as in libCacheSim)."""
    p = WTinyLFU(capacity=capacity)
    for k in range(capacity):
        p.on_insert(k)
    return p


def test_the_first_eviction_fills_main_then_a_cold_candidate_loses():
    p = warm()
    assert p.estimate(99) == 1 and p.estimate(0) == 1
    # Keys move to main while it has room (0..18 probation, 19..97 protected, 98 probation: no
    # segment has room), each counted once more on the way; 99 then meets main's victim, 0.
    assert p.evict() == 99
    assert [p.segment_of(k) for k in (0, 18, 19, 97, 98)] == ["probation"] * 2 + ["protected"] * 2 + ["probation"]


def test_admission_rejects_a_cold_candidate_and_admits_one_with_history():
    p = warm()
    p.evict()
    p.on_insert(500)
    assert (p.estimate(500), p.estimate(0)) == (1, 2)
    assert p.evict() == 500  # cold: rejected, the hot victim 0 stays
    assert 0 in p and 500 not in p
    p.on_insert(500)  # the sketch remembers it: 2 adds before, 3 now
    assert p.evict() == 0  # admitted; main's victim leaves instead
    assert p.segment_of(500) == "probation" and 0 not in p


def test_slru_promotes_demotes_and_dooms_the_probation_overflow():
    p = warm()
    p.evict()
    p.on_hit(1)  # probation -> protected, whose LRU key (19) drops back to probation
    assert p.segment_of(1) == "protected" and p.segment_of(19) == "probation"
    # Probation was one over (20 > 19): libCacheSim evicts its LRU key at once; here it is doomed.
    assert p.segment_of(0) == "doomed" and 0 in p
    assert p.peek() == 0 and p.evict() == 0


def test_window_hits_are_not_counted_and_main_hits_are():
    p = warm()
    p.evict()
    p.on_insert(700)
    p.on_hit(700)
    assert p.estimate(700) == 1
    before = p.estimate(50)
    p.on_hit(50)
    assert p.estimate(50) == before + 1


def test_counters_halve_after_32_mn_main_hits():
    p = warm()
    p.evict()
    e0 = p.estimate(50)
    for _ in range(32 * 99):
        p.on_hit(50)
    assert p.estimate(50) == (e0 + 32 * 99) // 2


def test_doorkeeper_keeps_first_adds_out_of_the_counters():
    p = WTinyLFU(capacity=100, doorkeeper=True)
    p.on_insert(7)
    assert p.estimate(7) == 1 and not any(p._counts)
    p.on_insert(8)
    p.evict()  # both move to main, and their second add reaches the counters
    assert p.estimate(7) == 2
    assert p.params()["doorkeeper"] is True


def test_vectorised_xxh64_and_batched_counters_match_the_scalar_path():
    rng = random.Random(1)
    keys = [rng.getrandbits(64) for _ in range(500)] + list(range(300))
    for seed in (0x12345678, 0x12344321):
        got = xxh64_u64(np.array(keys, dtype=np.uint64), seed).tolist()
        assert got == [xxhash.xxh64_intdigest(k.to_bytes(8, "little"), seed) for k in keys]
    batched, scalar = WTinyLFU(capacity=5000), WTinyLFU(capacity=5000)
    scalar._strikes = 8  # batching off
    assert [batched._indices(k) for k in range(1000)] == [scalar._indices(k) for k in range(1000)]
    assert batched._indices(b"\x01" * 16) == scalar._indices(b"\x01" * 16)


def test_a_refused_window_key_is_admitted_and_refusing_all_gives_none():
    p = warm()
    p.evict()
    p.on_insert(500)
    assert p.evict(lambda k: k != 500) == 0  # 500 is in use: it enters main without a contest
    assert p.segment_of(500) == "probation"
    assert p.evict(lambda k: False) is None and len(p) == 99
    assert p.evict(lambda k: k == 42) == 42


def test_many_refusals_cost_amortised_constant():
    p = WTinyLFU(capacity=2000)
    for k in range(2000):
        p.on_insert(k)
    calls = 0

    def allowed(k):
        nonlocal calls
        calls += 1
        return k % 20 != 0

    out = [p.evict(allowed) for _ in range(1900)]
    assert len(set(out)) == 1900 and all(k % 20 for k in out)
    assert calls < 3 * 2000  # refused probation keys are promoted, not rescanned on every call


def test_peek_agrees_with_evict_and_changes_nothing():
    rng = random.Random(5)
    p = WTinyLFU(capacity=120)
    nxt = 0
    for _ in range(3000):
        if len(p) < 120:
            p.on_insert(nxt)
            nxt += 1
        elif rng.random() < 0.6:
            p.on_hit(rng.choice(list(p._idx)))
        else:
            banned = set(rng.sample(range(nxt), nxt // 3)) if rng.random() < 0.5 else set()

            def can(k, banned=banned):
                return k not in banned

            state = (list(p._win), list(p._prob), list(p._prot), list(p._doomed), list(p._counts))
            want = p.peek(can)
            assert (list(p._win), list(p._prob), list(p._prot), list(p._doomed), list(p._counts)) == state
            assert p.evict(can) == want


def test_without_capacity_and_validation():
    p = make_policy("w-tinylfu")
    for k in range(10):
        p.on_insert(k)
    assert sorted(p.evict() for _ in range(10)) == list(range(10))
    with pytest.raises(ConfigError):
        WTinyLFU(capacity=100, slru=(1, 0))


@pytest.mark.parametrize("capacity", sorted(LCS_MISSES))
def test_matches_libcachesim_on_the_trace_head(trace_head, capacity):
    assert trace_head.stream.size == 80619 and trace_head.unique_blocks == 55287
    p, resident, misses, doomed_hits = WTinyLFU(capacity=capacity), 0, 0, 0
    for b in trace_head.stream.tolist():
        if b in p:
            doomed_hits += p.segment_of(b) == "doomed"
            p.on_hit(b)
            continue
        misses += 1
        if resident >= capacity:
            p.evict()
        else:
            resident += 1
        p.on_insert(b)
    # libCacheSim had already evicted a doomed key, so a use of one is its miss.
    assert misses + doomed_hits == LCS_MISSES[capacity]
    assert doomed_hits <= 5
    r = simulate(trace_head, WTinyLFU(capacity=capacity), capacity, semantics="object")
    assert r.misses == misses
