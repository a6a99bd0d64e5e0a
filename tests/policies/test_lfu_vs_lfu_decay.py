"""lfu and lfu-decay give equal results on the synthetic trace at 1 % and 5 % (docs/policies.md says why).

With no decay, lfu-decay is lfu: the value is the use count and ties go to the key that reached it
first, lfu's bucket order. Decay changes the order only once a used key has sat idle long enough
for its decayed uses to fall below a fresh key's single use: for a key used twice at once, more
than one half-life (600 s by default; the synthetic trace spans 1,022 s). At 1 % and 5 % most used
blocks are interior nodes of the index, which cannot be evicted anyway, so the decay overrides the
count in few evictions, and the victims it changes are never the difference between a hit and a
miss: every total is equal. A shorter half-life makes them differ. These tests pin each step, so
the equal figures read as the trace's, not as a decay that does nothing.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from ctxcache.cli import default_trace
from ctxcache.policies.lfu import LFU
from ctxcache.policies.lfu_decay import LFUDecay
from ctxcache.sim.simulator import SimResult, Trace, simulate
from ctxcache.sim.traces import read_mooncake

HALF_LIFE = 600.0  # lfu-decay's default: decay = ln 2 / 600 per second


class _Recording:
    """Mixed into a policy: keeps the victims it picks, in order."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.victims: list[Any] = []

    def evict(self, can_evict: Any = None) -> Any:
        key = super().evict(can_evict)
        self.victims.append(key)
        return key


class _VictimLFU(_Recording, LFU):
    name = "lfu"


class _VictimLFUDecay(_Recording, LFUDecay):
    name = "lfu-decay"


@pytest.fixture(scope="module")
def synthetic() -> Trace:
    return Trace(list(read_mooncake(default_trace("mooncake_synthetic_trace.jsonl"))))


@pytest.fixture(scope="module")
def lfu_runs(synthetic: Trace) -> dict[float, tuple[SimResult, list[Any]]]:
    """lfu's result and victims at 1 % and 5 %, run once for every comparison here."""
    runs = {}
    for size in (0.01, 0.05):
        lfu = _VictimLFU()
        runs[size] = (simulate(synthetic, lfu, synthetic.capacity(size)), lfu.victims)
    return runs


def _decayed(trace: Trace, size: float, half_life: float) -> tuple[SimResult, list[Any]]:
    dec = _VictimLFUDecay(decay=math.log(2) / half_life if half_life else 0.0)
    return simulate(trace, dec, trace.capacity(size)), dec.victims


def _twice_used_then_idle(policy: LFU | LFUDecay, idle: float) -> Any:
    """Key a used twice at t=0, key b inserted after ``idle`` seconds; the victim between them."""
    now = [0.0]
    policy.clock = lambda: now[0]
    policy.on_insert("a")
    policy.on_hit("a")
    now[0] = idle
    policy.on_insert("b")
    return policy.evict()


def test_decay_overrides_the_count_only_after_a_half_life_of_idleness():
    assert _twice_used_then_idle(LFU(), HALF_LIFE + 1) == "b"  # fewest uses, however stale the others
    assert _twice_used_then_idle(LFUDecay(), HALF_LIFE - 1) == "b"  # 2 x 2^(-599/600) > 1
    assert _twice_used_then_idle(LFUDecay(), HALF_LIFE + 1) == "a"  # 2 x 2^(-601/600) < 1


def test_without_decay_lfu_decay_evicts_exactly_as_lfu(synthetic: Trace, lfu_runs: Any) -> None:
    a, lfu_victims = lfu_runs[0.01]
    b, victims = _decayed(synthetic, 0.01, 0.0)
    assert len(lfu_victims) > 100_000
    assert victims == lfu_victims
    assert (a.misses, a.hit_tokens) == (b.misses, b.hit_tokens)


@pytest.mark.parametrize(("size", "evictions"), [(0.01, 113_308), (0.05, 101_112)])
def test_at_1_and_5_percent_the_decay_fires_but_changes_no_total(
    synthetic: Trace, lfu_runs: Any, size: float, evictions: int
) -> None:
    a, lfu_victims = lfu_runs[size]
    b, victims = _decayed(synthetic, size, HALF_LIFE)
    assert len(lfu_victims) == len(victims) == evictions
    assert victims != lfu_victims  # the decay did change victims (2 and 10 requests' evictions)
    assert (a.misses, a.hit_tokens) == (b.misses, b.hit_tokens)


@pytest.mark.parametrize("size", [0.01, 0.05])
def test_a_shorter_half_life_makes_them_differ(synthetic: Trace, lfu_runs: Any, size: float) -> None:
    a, _ = lfu_runs[size]
    b, _ = _decayed(synthetic, size, HALF_LIFE / 2)
    assert a.hit_tokens != b.hit_tokens
