"""W-TinyLFU promises (wtinylfu.py docstring) that test_wtinylfu.py checks only once: the
protected segment holds exactly its limit, and the sketch is halved after *every* 32 x Mn main hits."""

from __future__ import annotations

from ctxcache.policies.wtinylfu import WTinyLFU


def warm() -> WTinyLFU:
    """C = 100: window 1, main 99 (probation limit 19, protected 79); after the first eviction
    0..18 and 98 are in probation, 19..97 in protected."""
    p = WTinyLFU(capacity=100)
    for k in range(100):
        p.on_insert(k)
    p.evict()
    return p


def test_protected_holds_its_limit_and_demotes_only_beyond_it():
    p = warm()
    p.on_remove(50)  # protected: 78 of 79
    p.on_hit(1)  # promoted: protected is exactly full, nothing is demoted
    assert p.segment_of(1) == "protected" and p.segment_of(19) == "protected"
    assert p.segment_of(0) == "probation"  # probation lost a key: no overflow, nothing doomed
    p.on_hit(2)  # one beyond the limit: protected's LRU key drops back to probation
    assert p.segment_of(19) == "probation"


def test_counters_halve_again_after_the_next_32_mn_main_hits():
    p = warm()
    period = 32 * 99
    e0 = p.estimate(50)
    for _ in range(period):
        p.on_hit(50)
    first = (e0 + period) // 2
    assert p.estimate(50) == first
    for _ in range(period - 1):
        p.on_hit(50)
    assert p.estimate(50) == first + period - 1  # the count starts again at 0 after a halving
    p.on_hit(50)
    assert p.estimate(50) == (first + period) // 2


def test_slru_weights_split_main_in_their_ratio():
    # slru (2, 3): probation Mn * 2 // 5, protected Mn * 3 // 5; keys fill probation first.
    p = WTinyLFU(capacity=100, slru=(2, 3))  # Mn 99: probation 39, protected 59
    for k in range(100):
        p.on_insert(k)
    p.evict()  # the window moves into main
    segs = [p.segment_of(k) for k in range(99)]
    assert segs[:39] == ["probation"] * 39 and segs[39:98] == ["protected"] * 59


def test_a_veto_on_mains_victim_leaves_admission_to_the_sketch():
    # Main's LRU key is pinned: the next allowed main key is the one the window key must beat.
    p = warm()
    p.on_insert(500)  # cold: estimate 1, against 2 for every main key
    assert p.evict(lambda k: k != 0) == 500  # rejected, as without a veto
    assert 0 in p and 1 in p
    p.on_insert(600)
    assert p.evict() == 600 and p.peek(lambda k: k != 0) == 1
