"""The contract every registered policy keeps, run over the whole registry."""

from __future__ import annotations

import random

import pytest

from ctxcache.errors import ConfigError, UnknownPolicyError
from ctxcache.policies import make_policy, policy_names

from ..conftest import FakeClock

ALL = policy_names()


@pytest.fixture(params=ALL)
def policy(request):
    return make_policy(request.param, clock=FakeClock())


def test_registry_has_the_core_policies():
    assert {"lru", "fifo", "lfu", "lfu-decay"} <= set(ALL)


def test_evicts_each_key_exactly_once(policy):
    keys = list(range(50))
    for k in keys:
        policy.on_insert(k)
        policy.clock.advance(1)
    rng = random.Random(0)
    for _ in range(100):
        policy.on_hit(rng.choice(keys))
        policy.clock.advance(1)
    assert len(policy) == 50
    out = []
    while (k := policy.evict()) is not None:
        assert k not in policy
        out.append(k)
    assert sorted(out) == keys and len(policy) == 0


def test_peek_agrees_with_evict_and_changes_nothing(policy):
    for k in range(10):
        policy.on_insert(k)
        policy.clock.advance(1)
    policy.on_hit(3)
    for _ in range(10):
        p = policy.peek()
        assert p == policy.peek()
        assert policy.evict() == p


def test_can_evict_is_respected(policy):
    for k in range(20):
        policy.on_insert(k)
        policy.clock.advance(1)
    allowed = {5, 17}
    got = {policy.evict(lambda k: k in allowed), policy.evict(lambda k: k in allowed)}
    assert got == allowed
    assert policy.evict(lambda k: False) is None
    assert len(policy) == 18  # refusals leave everything in place


def test_on_remove_forgets_the_key(policy):
    for k in range(5):
        policy.on_insert(k)
    policy.on_remove(2)
    policy.on_remove(99)  # unknown keys are ignored
    assert 2 not in policy and len(policy) == 4
    out = []
    while (k := policy.evict()) is not None:
        out.append(k)
    assert sorted(out) == [0, 1, 3, 4]


def test_empty_policy_has_no_victim(policy):
    assert policy.peek() is None and policy.evict() is None


def test_unknown_policy_lists_the_known_ones():
    with pytest.raises(UnknownPolicyError, match="known: .*lru"):
        make_policy("mru")


def test_policy_params_from_a_mapping():
    p = make_policy({"name": "lfu-decay", "decay": 0.5})
    assert p.params() == {"decay": 0.5}
    with pytest.raises(ConfigError, match="bad parameters"):
        make_policy({"name": "lru", "nope": 1})
    with pytest.raises(ConfigError, match="decay"):
        make_policy({"name": "lfu-decay", "decay": -1})
