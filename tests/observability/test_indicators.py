"""The three indicators against hand-computed examples (arithmetic in the comments)."""

import math

import pytest

from ctxcache.observability.indicators import (
    AgeSkew,
    EvictionEntropy,
    HitRateSlope,
    ls_slope,
    normalized_entropy,
    sample_skewness,
)
from ctxcache.observability.observer import CacheObserver


class Clock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


def test_ls_slope_by_hand():
    # mean x = mean y = 2.5; Sxy = 0.75 * 4 = 3; Sxx = 2.25 + 0.25 + 0.25 + 2.25 = 5 -> 0.6
    assert ls_slope([1, 2, 3, 4], [2, 1, 4, 3]) == pytest.approx(0.6)
    assert ls_slope([0, 1, 2], [1, 3, 5]) == pytest.approx(2.0)
    assert ls_slope([5], [1]) == 0.0
    assert ls_slope([2, 2], [1, 9]) == 0.0  # no spread in x: no slope


def test_hit_rate_slope_by_hand():
    c = Clock()
    s = HitRateSlope(c, window_s=600)
    s.sample(0, 0)
    c.t = 60
    s.sample(50, 100)  # interval [0, 60): 50 % at 0.5 min
    c.t = 120
    s.sample(80, 200)  # interval [60, 120): 30 % at 1.5 min
    assert s.points() == [(0.5, 50.0), (1.5, 30.0)]
    assert s.value() == pytest.approx(-20.0)  # %/min
    c.t = 180
    s.sample(80, 200)  # no lookups in [120, 180): no point
    assert len(s.points()) == 2


def test_hit_rate_slope_needs_a_span_of_time():
    c = Clock()
    s = HitRateSlope(c, window_s=600)  # points must span >= 30 s
    for t, h, n in [(0.0, 0, 0), (0.1, 0, 100), (0.2, 100, 200)]:  # 0 % then 100 % within 0.2 s
        c.t = t
        s.sample(h, n)
    assert len(s.points()) == 2 and s.value() == 0.0


def test_hit_rate_slope_window_and_reset():
    c = Clock()
    s = HitRateSlope(c, window_s=100)
    for t, h, n in [(0, 0, 0), (60, 60, 100), (120, 100, 200), (180, 190, 300)]:
        c.t = t
        s.sample(h, n)
    # window (80, 180]: the 60 s sample opens the first interval inside it -> 40 % at 1.5, 90 % at 2.5 min
    assert s.points() == [(1.5, 40.0), (2.5, 90.0)]
    assert s.value() == pytest.approx(50.0)
    c.t = 200
    s.sample(5, 10)  # counters went backwards: a new cache, start over
    assert s.points() == []
    assert s.value() == 0.0
    with pytest.raises(ValueError):
        HitRateSlope(c, window_s=0)


def test_normalized_entropy_by_hand():
    assert normalized_entropy([2, 2]) == pytest.approx(1.0)
    assert normalized_entropy([1, 1, 1, 1]) == pytest.approx(1.0)
    # p = (3/4, 1/4): H = 0.75 ln(4/3) + 0.25 ln 4 = 0.215762 + 0.346574 = 0.562335; / ln 2 = 0.811278
    assert normalized_entropy([3, 1]) == pytest.approx(0.811278, abs=1e-6)
    assert normalized_entropy([5]) == 0.0
    assert normalized_entropy([]) == 0.0
    assert normalized_entropy([4, 0, 0]) == 0.0  # empty groups do not count


def test_eviction_entropy_window():
    c = Clock()
    e = EvictionEntropy(c, window_s=10)
    for g in "aaab":
        e.observe(g)
    assert e.value() == pytest.approx(0.811278, abs=1e-6)
    assert e.count() == 4 and e.rate_per_s() == pytest.approx(0.4)
    c.t = 5
    e.observe("b")
    e.observe("b")  # a:3 b:3 -> even
    assert e.value() == pytest.approx(1.0)
    c.t = 12  # the first four (t=0) left the window: only b
    assert e.by_group() == {"b": 2}
    assert e.value() == 0.0


def test_eviction_entropy_buckets_close_at_reads():
    c = Clock()
    e = EvictionEntropy(c, window_s=10)
    bucket = e.bucket  # what a hook binds
    for g in "ab":
        bucket[0][g] += 1
    assert e.by_group() == {"a": 1, "b": 1}  # the read closed the bucket at t=0
    bucket[0]["c"] = 1  # a hook writes through the same holder into the new bucket
    c.t = 10  # the t=0 bucket is out of (0, 10]
    assert e.by_group() == {"c": 1}


def test_sample_skewness_by_hand():
    # mean 4, deviations -3 -2 -1 6: m2 = 50/4 = 12.5, m3 = 180/4 = 45, g1 = 45 / 12.5^1.5 = 1.018234;
    # G1 = g1 * sqrt(4 * 3) / (4 - 2) = 1.763633
    assert sample_skewness([1, 2, 3, 10]) == pytest.approx(1.763633, abs=1e-6)
    assert sample_skewness([10, 3, 2, 1]) == pytest.approx(1.763633, abs=1e-6)
    assert sample_skewness([-1, -2, -3, -10]) == pytest.approx(-1.763633, abs=1e-6)
    assert sample_skewness([1, 2, 3]) == pytest.approx(0.0)
    assert sample_skewness([7, 7, 7, 7]) == 0.0
    assert sample_skewness([1, 2]) == 0.0


def test_age_skew_from_births():
    c = Clock()
    a = AgeSkew(c)
    for t, k in [(0, "old"), (7, "x"), (8, "y"), (9, "z")]:
        c.t = t
        a.inserted(k)
    c.t = 10  # ages 10, 3, 2, 1: the same multiset as the example above (one old block, young mass)
    assert a.value() == pytest.approx(1.763633, abs=1e-6)
    a.inserted("old")  # a re-insert keeps the first birth
    a.removed("old")
    a.removed("missing")
    assert sorted(a.ages()) == [1, 2, 3]
    assert a.mean_age_s() == pytest.approx(2.0)


def test_age_skew_samples_by_key_hash():
    c = Clock()
    a = AgeSkew(c, sample_mask=3)
    for i in range(400):
        a.inserted(i)  # small ints hash to themselves: exactly the multiples of 4 are tracked
    assert len(a) == 100 and all(k % 4 == 0 for k in a.born)
    a.removed(4)
    a.removed(5)
    assert len(a) == 99


def test_age_skew_sample_is_bounded():
    c = Clock()
    a = AgeSkew(c, max_sample=100)
    for i in range(1000):
        c.t = float(i)
        a.inserted(i)
    assert 100 <= len(a.ages()) <= 101
    assert abs(a.value()) < 0.1  # uniform births: no skew


def test_observer_snapshot():
    c = Clock()
    o = CacheObserver(c, window_s=60)
    o.sample(0, 0)
    for k in range(4):
        o.block_inserted(k)
    c.t = 30
    o.block_evicted(0, "t1")
    o.block_evicted(1, "t2")
    o.block_dropped(2)
    o.sample(30, 60)
    s = o.snapshot()
    assert s.eviction_entropy == pytest.approx(1.0)
    assert s.evictions_in_window == 2 and s.resident_blocks_tracked == 1
    assert math.isclose(s.eviction_rate_per_s, 2 / 60)
    assert s.mean_age_s == pytest.approx(30.0)
    c.t = 100
    assert o.snapshot().evictions_in_window == 0
    assert set(s.to_dict()) >= {"hit_rate_slope_pct_per_min", "eviction_entropy", "context_age_skew"}
