"""KeyFilter sizing: ``saturated`` means the filter's false positives passed the configured rate.

A filter configured for fewer keys than MIN_ITEMS is built for MIN_ITEMS; it once reported
``saturated`` (and woke a full key scan) as soon as it held more keys than configured, while its
false positives were still far below the target. Keys are ints: their hash is the int itself, so
unlike bytes (salted per process) every run builds the same filters.
"""

from __future__ import annotations

import random
from functools import cache
from statistics import mean

import pytest
from rbloom import Bloom

from ctxcache.tiers.bloom import MIN_ITEMS, KeyFilter, _hash_counts


@cache
def _absent() -> list[int]:
    """Probes no filter holds (keys are drawn above 2**59): ~100 false positives at 0.001."""
    return random.Random(0).sample(range(1 << 59), 100_000)


def _keys(seed: int, n: int) -> list[int]:
    return random.Random(seed).sample(range(1 << 59, 1 << 60), n)


def _rate(f: KeyFilter) -> float:
    return f.might_contain_many(_absent()).count(True) / len(_absent())


@pytest.mark.parametrize("fpr", [0.01, 0.001])
@pytest.mark.parametrize("items", [64, 100, 333, 640, 1023])
def test_a_small_filter_is_saturated_only_once_its_false_positives_reach_the_target(items, fpr):
    keys = _keys(items, 3 * MIN_ITEMS)
    f = KeyFilter(items, fpr)
    f.rebuild(iter(()))
    for k in keys[:items]:
        f.add(k)
    assert not f.saturated
    assert _rate(f) <= 1.5 * fpr  # one filter's rate scatters ~15% around its expected value
    n = items
    while not f.saturated:
        f.add(keys[n])
        n += 1
    assert _rate(f) >= 0.5 * fpr, f"saturated at {n} keys, false positives still far below {fpr}"
    assert n > MIN_ITEMS
    for k in keys[n : 2 * n]:
        f.add(k)
    assert f.saturated and _rate(f) > 3 * fpr


@pytest.mark.parametrize("fpr", [0.01, 0.001])
def test_filled_to_capacity_its_false_positives_average_the_target(fpr):
    sizes = [64 + 41 * i for i in range(24)] + [2000, 5000]  # 64..1007, and two above the floor
    rates = []
    for size in sizes:
        f = KeyFilter(size, fpr)
        f.rebuild(iter(_keys(size, f.capacity)))
        assert not f.saturated and f.count == f.capacity
        rates.append(_rate(f))
    assert 0.85 * fpr <= mean(rates) <= 1.1 * fpr, (fpr, mean(rates))


@pytest.mark.parametrize("fpr", [0.3, 0.25, 0.05, 0.01, 2**-6, 0.001, 1e-7])
def test_capacity_covers_what_was_asked_and_little_more(fpr):
    for items in [1, 10, 64, 1023, 1024, 1025, 4096, 100_003]:
        f = KeyFilter(items, fpr)
        want = max(items, MIN_ITEMS)
        assert want <= f.capacity <= 1.01 * want + 1, (items, f.capacity)
        f.rebuild(iter(range(want)))
        assert not f.saturated and f.stats()["capacity"] == f.capacity
        f.add(-1)
        assert f.saturated == (f.count > f.capacity)


@pytest.mark.parametrize("fpr", [0.3, 0.125, 0.1, 0.01, 2**-6, 2**-7, 0.001, 1e-7])
def test_the_hash_count_rbloom_picks_is_one_the_capacity_accounts_for(fpr):
    for items in [1, 7, 1024, 12_345, 1_000_000]:
        raw = Bloom(items, fpr, hash_func=lambda o: o).save_bytes()  # its first 8 bytes: the count
        assert int.from_bytes(raw[:8], "little") in _hash_counts(fpr)


@pytest.mark.parametrize("fpr", [0.0, 0.5, 0.9, 1.0])
def test_a_rate_where_rbloom_may_not_hash_at_all_is_refused(fpr):
    with pytest.raises(ValueError, match=r"0 < fpr < 0.5"):
        KeyFilter(100, fpr)
