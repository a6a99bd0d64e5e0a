"""TTL: expiry order under an injected clock, expired(), refusals."""

from __future__ import annotations

import pytest

from ctxcache.errors import ConfigError
from ctxcache.policies import make_policy

from ..conftest import FakeClock
from .helpers import drain


def scenario(refresh: bool):
    clock = FakeClock()
    p = make_policy({"name": "ttl", "ttl": 300, "refresh_on_hit": refresh}, clock=clock)
    for k in "abc":
        p.on_insert(k)  # a at 0, b at 10, c at 20
        clock.advance(10)
    p.on_hit("a")  # at 30
    return p, clock


def test_expiry_counts_from_the_last_use():
    p, clock = scenario(refresh=True)
    assert [p.expires_at(k) for k in "abc"] == [330, 310, 320]
    assert p.expired(now=315) == ["b"]
    clock.advance(295)  # t = 325
    assert p.expired() == ["b", "c"]
    assert drain(p) == ["b", "c", "a"]


def test_without_refresh_expiry_counts_from_the_insert():
    p, _ = scenario(refresh=False)
    assert [p.expires_at(k) for k in "abc"] == [300, 310, 320]
    assert p.expired(now=305) == ["a"]
    assert p.peek() == "a"
    assert drain(p) == ["a", "b", "c"]


def test_the_soonest_expiry_goes_first_even_before_any_expired():
    p, _ = scenario(refresh=True)
    assert p.expired() == []
    assert p.evict() == "b"


def test_a_refused_key_is_in_use_so_its_clock_restarts():
    p, clock = scenario(refresh=False)
    clock.advance(100)  # t = 130
    assert p.evict(lambda k: k != "a") == "b"
    assert p.expires_at("a") == 430  # refused at t = 130: treated as used then
    assert p.evict(lambda k: False) is None and len(p) == 2
    assert drain(p) == ["c", "a"]


def test_many_refusals_cost_amortised_constant():
    p = make_policy("ttl", clock=FakeClock())
    for k in range(2000):
        p.on_insert(k)
    calls = 0

    def allowed(k):
        nonlocal calls
        calls += 1
        return k % 20 != 0

    out = [p.evict(allowed) for _ in range(1900)]
    assert sorted(out) == [k for k in range(2000) if k % 20]
    assert calls < 2 * 2000


def test_a_clock_that_steps_back_does_not_reorder_keys():
    clock = FakeClock(100.0)
    p = make_policy({"name": "ttl", "ttl": 10}, clock=clock)
    p.on_insert("x")
    clock.t = 50.0  # stepped back: read as standing still at 100
    p.on_insert("y")
    assert p.expires_at("y") == 110 and drain(p) == ["x", "y"]


def test_remove_unknown_and_params():
    p = make_policy("ttl", clock=FakeClock())
    p.on_insert(1)
    p.on_remove(1)
    p.on_remove(2)
    assert len(p) == 0 and p.evict() is None and p.expired() == []
    assert p.params() == {"ttl": 300.0, "refresh_on_hit": True}
    with pytest.raises(ConfigError):
        make_policy({"name": "ttl", "ttl": 0})
