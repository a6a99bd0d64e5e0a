"""prefix-aware's learned quantities (prefix_aware.py, docs/prefix-aware.md) that the golden miss
counts do not pin down: the age bins, the hit density of quickly reused blocks, the count's decay."""

from __future__ import annotations

import math

import pytest

from ctxcache.policies.prefix_aware import _MID, _NBINS, PrefixAware, _bin

from ..conftest import FakeClock


def test_age_bins_are_half_octaves_from_one_second():
    # [0, 1), [1, 1.41), [1.41, 2), [2, 2.83), ...: the last bin takes every older age.
    assert [_bin(a) for a in (0.0, 0.99, 1.0, 1.4, 1.42, 1.99, 2.0, 2.9)] == [0, 0, 1, 1, 2, 2, 3, 4]
    assert _bin(1e9) == _NBINS - 1
    # Each bin's representative age (used for the time a block is held) lies in that bin.
    assert [_bin(a) for a in _MID] == list(range(_NBINS))


def test_blocks_always_reused_within_a_second_are_worth_most_while_young():
    clock = FakeClock()
    p = PrefixAware(clock=clock, update_every=16, warmup=16, max_count=1)
    for k in range(200):  # each block: inserted, hit 0.2 s later, then never used again
        p.on_insert(k)
        clock.advance(0.2)
        p.on_hit(k)
        clock.advance(0.2)
        if len(p) > 20:
            p.evict()
    hd = p._hd[0]
    assert p._learned and all(math.isfinite(x) and x >= 0 for x in hd)
    # Every reuse came before the age of 1 s: a young block is the one worth keeping.
    assert hd[0] > 0 and hd[0] == max(hd)


def test_a_block_sure_to_be_reused_within_a_second_gives_a_hit_per_block_second_at_least():
    clock = FakeClock()
    p = PrefixAware(clock=clock, update_every=16, warmup=16, max_count=1)
    for k in range(64):  # nothing evicted: every ended lifetime is a reuse at age 0.2 s
        p.on_insert(k)
        clock.advance(0.2)
        p.on_hit(k)
    # Held at most 1 s per hit while young: hit density >= 1 hit per block-second in bin [0, 1).
    assert p._learned and p._hd[0][0] >= 1.0


@pytest.mark.parametrize(("half_life", "want"), [(10.0, 1.25), (0.0, 2.0)])
def test_a_blocks_count_halves_per_half_life_of_idle_time(half_life, want):
    clock = FakeClock()
    p = PrefixAware(clock=clock, freq_half_life=half_life)
    p.on_insert("a")  # count 1
    clock.advance(20.0)  # two half-lives idle
    p.on_hit("a")  # 1 x 0.5^2 + 1, or 1 + 1 without decay
    assert p._meta["a"][2] == pytest.approx(want)


def test_a_hit_on_a_private_history_gets_its_own_class():
    # shared_count 2: a request whose deepest hit block had been used fewer than 2 times continues
    # a private history, not a shared prompt, and its blocks are classed apart (classes 4-7).
    p = PrefixAware(clock=FakeClock(), shared_count=2)  # max_count 4: classes 0-3 and 4-7
    p.on_insert("a")  # no hit in the request: class of count 1 among the shared ones
    assert p._meta["a"][0] == 0
    p.on_hit("a")  # deepest hit used once before: private; count 2
    assert p._meta["a"][0] == 4 + 1
    p.on_hit("a")  # used twice before: shared from now on; count 3
    assert p._meta["a"][0] == 2
    assert p.evict() == "a"


def test_blocks_refused_once_are_candidates_again_when_allowed():
    # Without an index to say when a block becomes a leaf again, evict requeues every block once
    # it finds nothing queued: a veto (a pin) that is lifted must not hide blocks forever.
    clock = FakeClock()
    p = PrefixAware(clock=clock)
    for k in "abc":
        p.on_insert(k)
        clock.advance(1)
    assert p.evict(lambda k: False) is None and len(p) == 3
    assert [p.evict(), p.evict(lambda k: k != "b"), p.evict()] == ["a", "c", "b"]


def test_peek_names_what_evict_takes_past_refused_blocks():
    # peek stopped at each class's first refused block: None, or a younger class's head.
    clock = FakeClock()
    p = PrefixAware(clock=clock)
    for k in "abc":
        p.on_insert(k)
        clock.advance(1)
    assert p.peek(lambda k: k != "a") == "b"
    assert p.evict(lambda k: False) is None
    assert p.peek() == "a" == p.evict()  # after refusing all, evict requeues every block


@pytest.mark.parametrize(
    ("burst", "period"), [(3000, 1.0), (2048, 4.0), (1024, 0.5), (300, 0.5), (700, 1.0), (1500, 2.0)]
)
def test_tau_counts_every_insert_of_bursts_that_share_a_clock_reading(burst, period):
    # The trace clock gives all of a request's blocks one time stamp. Bursts of `burst` inserts
    # every `period` seconds into a cache held at `resident` blocks: burst / period inserts per
    # second, so tau (resident / insert rate) is resident * period / burst. Closing the rate's
    # window on zero elapsed time dropped 1,024 inserts at a time (tau 2.9x and 2x too long for
    # the first two cases). Closing it mid-burst set part of a burst against whole periods (300
    # per 0.5 s gave 2.552 for 2.5, 700 per 1 s 1.978 for 2.143): a window closes only at the
    # first insert of a new reading. 1,024 per 0.5 s and 1,500 per 2 s passed either way.
    resident, clock = 1500, FakeClock()
    p = PrefixAware(clock=clock)
    key = 0
    # tau is averaged (0.7 old, 0.3 new): 30 windows of at least 1,024 forget the filling cache
    for _ in range(max(30, 30 * 1024 // burst + 1)):
        for _ in range(burst):
            if len(p) >= resident:
                p.evict()
            p.on_insert(key)
            key += 1
        clock.advance(period)
    assert p.characteristic_time == pytest.approx(resident * period / burst, rel=2e-3)
