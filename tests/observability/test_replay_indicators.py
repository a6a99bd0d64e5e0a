"""Known changes on the real Mooncake trace move each indicator the expected way.

The trace (12k requests, one hour) is spread over 8 tenants by conversation; LRU, 20k blocks
(~11 % of its unique blocks). Disturbances start in the middle of a 5-minute window, so that
window sees before and after.
"""

import random

import pytest

from ctxcache.cli import default_trace
from ctxcache.errors import ConfigError
from ctxcache.observability.replay import assign_tenants, inject, replay
from ctxcache.sim.traces import Request, read_mooncake

CAP = 20_000
W = 300.0
CHANGE = 1650.0  # mid-window of [1500, 1800)


@pytest.fixture(scope="module")
def trace():
    path = default_trace()
    assert path.is_file(), f"the shared Mooncake trace is missing: {path}"
    return assign_tenants(list(read_mooncake(path)), 8)


@pytest.fixture(scope="module")
def runs(trace):
    def at(res, t):
        return next(w for w in res.windows if w["t"] <= t < w["t"] + W)

    rng = random.Random(7)
    out = {
        "clean": replay(trace, "lru", CAP, window_s=W),
        "half": replay(trace, "lru", lambda t: CAP if t < CHANGE else CAP // 2, window_s=W),
        "scan": replay(inject(trace, CHANGE, 60, 10, 16, None, rng), "lru", CAP, window_s=W),
        "flood": replay(inject(trace, CHANGE, 60, 10, 16, "flood", rng), "lru", CAP, window_s=W),
    }
    return out, at


def test_hit_rate_slope_falls_on_halving_and_scan(runs):
    r, at = runs
    clean = at(r["clean"], CHANGE)["hit_rate_slope"]
    for name in ("half", "scan"):
        got = at(r[name], CHANGE)["hit_rate_slope"]
        assert got < 0 and got < clean - 1.0, (name, got, clean)


def test_eviction_entropy_falls_under_a_tenant_flood(runs):
    r, _ = runs

    def lowest(res):  # the 10 minutes after the flood starts: its blocks are evicted by the hundred
        return min(w["eviction_entropy"] for w in res.windows if w["t"] + W >= CHANGE and w["t"] < CHANGE + 600)

    assert lowest(r["clean"]) > 0.95
    assert lowest(r["scan"]) > 0.95  # a scan spread over every tenant is no flood
    assert lowest(r["flood"]) < 0.85


def test_age_skew_rises_on_scan_and_halving(runs):
    r, at = runs
    clean = at(r["clean"], CHANGE)["age_skew"]
    for name in ("half", "scan"):
        got = at(r[name], CHANGE)["age_skew"]
        assert got > clean + 1.0, (name, got, clean)


def test_replay_agrees_with_the_simulator(trace):
    from ctxcache.sim.simulator import Trace, simulate

    head = trace[:2000]
    sim = simulate(Trace(head), "lru", 5000)
    rep = replay(head, "lru", 5000, window_s=60)
    assert rep.hit_tokens == sim.hit_tokens and rep.input_tokens == sim.input_tokens


def test_replay_rejects_bad_input():
    reqs = [Request(0.0, 512, 1, (1,))]
    with pytest.raises(ConfigError):
        replay(reqs, "lru", 0)
    with pytest.raises(ConfigError):
        replay(reqs, "lru", 10, window_s=0)
    with pytest.raises(ConfigError):
        replay(reqs, "belady", 10)
    assert replay([], "lru", 10).windows == []
