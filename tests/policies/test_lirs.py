"""LIRS: LIR/HIR status, the stack bound, libCacheSim's quirk, refusals, and agreement with libCacheSim."""

from __future__ import annotations

import pytest

from ctxcache.policies import make_policy
from ctxcache.policies.lirs import LIRS
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import Request

from .helpers import access, mixed_stream


def filled(cap=4):
    """capacity 4: one HIR slot, three LIR keys (a, b, c) from the warm-up, d resident HIR."""
    pol = LIRS(capacity=cap)
    for k in "abcd":
        access(pol, k, cap)
    return pol


def test_keeps_most_of_a_loop_slightly_larger_than_the_cache():
    lirs, lru = LIRS(capacity=100), make_policy("lru")
    keys = [k for _ in range(20) for k in range(110)]
    assert sum(not access(lru, k, 100) for k in keys) == len(keys)  # LRU always evicts the next key
    assert sum(not access(lirs, k, 100) for k in keys) < 0.2 * len(keys)


def test_new_keys_are_hir_and_go_before_older_lir_keys():
    pol = filled()
    assert pol.peek() == "d"  # LRU would pick a
    access(pol, "e", 4)
    assert "d" not in pol and "a" in pol
    # d is re-used while its entry is still in the stack: it comes back as LIR, and the oldest
    # LIR key, a, drops to the HIR queue behind e.
    access(pol, "d", 4)  # evicts e
    assert "e" not in pol
    assert [pol.evict(), pol.evict()] == ["a", "b"]


def test_hit_on_a_hir_key_out_of_the_stack_demotes_the_oldest_lir_key():
    pol = filled()
    for k in "abc":
        access(pol, k, 4)  # d is now below every LIR key: pruned from the stack, still resident
    access(pol, "d", 4)  # libCacheSim's quirk: the LIR set is full, so a is demoted first
    assert pol.peek() == "a"
    pol.evict()
    access(pol, "e", 4)  # the LIR set has room again: e becomes LIR
    assert pol.evict() == "d"


def test_stack_stays_within_twice_the_capacity():
    pol = LIRS(capacity=10)
    for i in range(1000):
        access(pol, i, 10)
        access(pol, i // 3, 10)
    assert len(pol) == 10
    assert len(pol._s) <= 20  # the stack of keys and ids (a private structure, bounded by design)


def test_refused_hir_key_is_treated_as_used():
    pol = filled()
    allowed = lambda k: k != "d"  # noqa: E731
    assert pol.peek(allowed) == "a"
    # d was in use: it became LIR, which demoted a, the next candidate.
    assert pol.evict(allowed) == "a"
    assert "d" in pol
    assert pol.evict(lambda k: False) is None and len(pol) == 3
    assert [pol.evict(), pol.evict(), pol.evict()] == ["b", "c", "d"]  # no HIR left: oldest LIR first


def test_on_remove_and_capacity_free_use():
    pol = filled()
    pol.on_remove("a")
    pol.on_remove("d")
    pol.on_remove("nope")
    assert len(pol) == 2 and "a" not in pol
    assert [pol.evict(), pol.evict(), pol.evict()] == ["b", "c", None]
    free = make_policy("lirs")
    for i in range(30):
        access(free, i % 12, 10)
    assert len(free) == 10
    assert make_policy({"name": "lirs", "hir_ratio": 0.1}, capacity=50).params() == {"capacity": 50, "hir_ratio": 0.1}


# Miss counts from libcachesim 0.3.5 (lcs.LIRS(cap, hashpower=16), one lcs.Request per block with
# obj_size=1, cache.get(req) per access), in /tmp/lcs/.venv; libcachesim is not a test dependency.
TRACE_3000 = {553: 76961, 2764: 72879, 5529: 68141, 11057: 64527}  # first 3000 requests, 80619 accesses
MIXED = {8: 19274, 30: 17555, 100: 13839, 250: 8118}  # mixed_stream(), 20000 accesses


@pytest.mark.parametrize("cap", sorted(TRACE_3000))
def test_matches_libcachesim_on_the_trace(trace_head, cap):
    assert simulate(trace_head, LIRS(capacity=cap), cap, semantics="object").misses == TRACE_3000[cap]


@pytest.mark.parametrize("cap", sorted(MIXED))
def test_close_to_libcachesim_on_a_mixed_stream(cap):
    tr = Trace([Request(0.0, 1, 0, tuple(mixed_stream()))])
    misses = simulate(tr, LIRS(capacity=cap), cap, semantics="object").misses
    # Exact until the quirk (a hit on a resident HIR key out of the stack) first fires; after it,
    # libCacheSim's own count of resident objects drifts and it can hold more than cap objects,
    # which a policy whose owner makes room cannot copy. Here that costs at most 8 misses.
    assert abs(misses - MIXED[cap]) <= (0 if cap == 8 else 10)
