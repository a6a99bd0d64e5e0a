"""Parameters as documented, peek that changes nothing even when it is refused, and state that
leaves with its key: contracts mutation testing found unchecked (docs/testing.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ctxcache.errors import ConfigError
from ctxcache.policies import make_policy, policy_names
from ctxcache.policies.arc import ARC
from ctxcache.policies.lfu_decay import LFUDecay
from ctxcache.policies.lirs import LIRS
from ctxcache.policies.prefix_aware import PrefixAware
from ctxcache.policies.s3fifo import S3FIFO
from ctxcache.policies.wtinylfu import WTinyLFU

from ..conftest import FakeClock

DOC = Path(__file__).resolve().parents[2] / "docs" / "prefix-aware.md"


def documented() -> dict[str, tuple[str, str]]:
    """name -> (default, range) from the parameter table of docs/prefix-aware.md."""
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|", DOC.read_text(), re.M)
    return {name: (default.strip().strip("`"), rng.strip()) for name, default, rng in rows}


def test_prefix_aware_defaults_are_the_documented_ones():
    doc, params = documented(), PrefixAware().params()
    assert sorted(doc) == sorted(params)
    for name, (default, _) in doc.items():
        assert params[name] == pytest.approx(list(ast.literal_eval(default)) if default == "()" else float(default))


def test_prefix_aware_accepts_each_documented_lower_bound_and_refuses_below_it():
    for name, (_, rng) in documented().items():
        m = re.match(r"(≥|>) (\d+(?:\.\d+)?)", rng) or re.match(r"\((\d+), ", rng)
        if m is None:
            continue  # new_edges: any ints
        if m.re.pattern.startswith(r"\("):  # an open interval (0, 1]: 0 refused, 1 accepted
            PrefixAware(**{name: 1})
            with pytest.raises(ConfigError, match="out of range"):
                PrefixAware(**{name: 0})
            continue
        op, bound = m.group(1), float(m.group(2))
        if op == "≥":
            PrefixAware(**{name: type(PrefixAware().params()[name])(bound)})
        with pytest.raises(ConfigError, match="out of range"):
            PrefixAware(**{name: bound - 1 if op == "≥" else bound})


def test_other_parameter_bounds():
    S3FIFO(move_threshold=1, max_freq=1)  # the smallest valid values
    for bad in ({"move_threshold": 0}, {"max_freq": 0}):
        with pytest.raises(ConfigError):
            S3FIFO(**bad)
    for bad in ({"error": 1.0}, {"error": 0.0}, {"window": 1.0}, {"window": 0.0}):
        with pytest.raises(ConfigError):
            WTinyLFU(**bad)


def history(name: str):
    pol = make_policy(name, clock=FakeClock())
    for k in range(30):
        pol.on_insert(k)
        pol.clock.advance(1)
        if k % 3 == 0:
            pol.on_hits([k // 2, k])
            pol.clock.advance(1)
    return pol


@pytest.mark.parametrize("name", policy_names())
def test_a_refused_peek_changes_nothing(name):
    # The mover asks peek with a can_evict that refuses pinned blocks; it only looks.
    looked, untouched = history(name), history(name)
    refused = {0, 1, 2, 3, 5, 8, 13}
    for _ in range(3):
        looked.peek(lambda k: k not in refused)
    assert [looked.evict() for _ in range(30)] == [untouched.evict() for _ in range(30)]


def test_lfu_decay_forgets_a_removed_key():
    pol = LFUDecay(clock=FakeClock())
    pol.on_insert("a")
    pol.on_hit("a")
    assert pol.value("a") > 1
    pol.on_remove("a")
    with pytest.raises(KeyError):
        pol.value("a")  # no per-key state outlives the key (memory stays bounded by residents)


def test_unsized_arc_grows_its_target_up_to_the_most_keys_it_held():
    # The live cache sizes by bytes, so ARC runs without a capacity: its c is the most keys it
    # has held, and p (the T1 target) may grow up to that, one step per B1 ghost hit.
    pol = ARC()
    for k in range(10):
        pol.on_insert(k)
    gone = [pol.evict() for _ in range(5)]
    assert gone == [0, 1, 2, 3, 4]
    for k in gone[:3]:
        assert k not in pol
        pol.on_insert(k)  # a B1 ghost hit each
    assert pol.p == 3


def test_w_tinylfu_takes_int_keys_outside_the_fast_range():
    pol = WTinyLFU(clock=FakeClock())
    for k in (-1, 2**64 - 1, 2**70):
        pol.on_insert(k)
        pol.on_hit(k)
    assert all(k in pol for k in (-1, 2**64 - 1, 2**70))


def test_lirs_promotion_after_a_removal_demotes_no_one():
    # A removed LIR key leaves the LIR set one short: the next promotion fills it, and only a
    # promotion beyond the limit demotes the oldest LIR key.
    pol = LIRS(capacity=10, hir_ratio=0.1)  # 9 LIR slots
    for k in range(10):
        pol.on_insert(k)  # 0-8 LIR, 9 resident HIR
    assert pol.evict() == 9  # non-resident, still in the stack
    pol.on_remove(0)
    pol.on_insert(9)  # re-used within the stack: LIR
    pol.on_insert(10)  # the LIR set is full again: 10 is HIR, the next victim
    assert pol.evict() == 10
