"""A policy's fused object-semantics loop (its ``replay_object``) against the reference loop.

``Policy.replay_object`` is the reference: one membership test and one public method call per
access. A policy that overrides it with its own loop over its own structures must give the same
misses and leave the same state, down to the order of every queue, which is what these tests
compare (every attribute, OrderedDicts and dicts in their iteration order).
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from ctxcache import accel
from ctxcache.policies import POLICIES, Policy, make_policy, policy_names
from ctxcache.policies.base import as_offline
from ctxcache.sim.simulator import Trace, _make, _TraceClock
from ctxcache.sim.traces import Request

FUSED = [n for n in policy_names() if "replay_object" in POLICIES[n].__dict__]


def _state(pol: Policy) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, v in vars(pol).items():
        if name == "clock" or callable(v) and not isinstance(v, (dict, list, set)):
            continue
        if isinstance(v, (OrderedDict, dict)):
            v = [(k, _plain(x)) for k, x in v.items()]
        elif isinstance(v, itertools.count):
            v = repr(v)
        else:
            v = _plain(v)
        out[name] = v
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (OrderedDict, dict)):
        return list(v.items())
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, set):
        return sorted(v, key=repr)
    if isinstance(v, float) and v != v:
        return "nan"
    return v


def _trace(rng: random.Random, n_req: int, universe: int, dense: bool) -> Trace:
    reqs, t = [], 0.0
    for _ in range(n_req):
        t += rng.choice([0.0, 0.0, 0.5, 3.0, 40.0, 700.0])
        if rng.random() < 0.05:
            t -= 1.0  # a clock that steps back
        n = rng.randint(0, 12)
        if dense:
            start = rng.randint(0, universe)
            blocks = (
                [start + j for j in range(n)] if rng.random() < 0.5 else [rng.randint(0, universe) for _ in range(n)]
            )
        else:
            blocks = [int(rng.paretovariate(1.2) * 7) % universe for _ in range(n)]
        reqs.append(Request(time=t, input_length=max(1, n) * 512, output_length=1, blocks=tuple(blocks)))
    return Trace(reqs)


VARIANTS: dict[str, list[dict[str, Any]]] = {
    "prefix-aware": [
        {"new_edges": (1,), "shared_count": 2.0, "freq_half_life": 60.0, "update_every": 16, "warmup": 16},
        {"update_every": 8, "warmup": 0, "cost_weight": 0.5, "margin": 1.0},
    ],
    "ttl": [{"ttl": 5.0, "refresh_on_hit": False}],
    "lfu-decay": [{"decay": 0.5}],
    "w-tinylfu": [{"doorkeeper": True}],
    "s3fifo": [{"move_threshold": 1, "max_freq": 1}],
}


def _run(
    name: str, trace: Trace, cap: int, fused: bool, params: dict[str, Any] | None = None, twice: bool = False
) -> tuple[int, dict[str, Any], list[Any]]:
    clock = _TraceClock()
    pol = _make({"name": name, **(params or {})}, clock, cap)
    pol.clock = clock
    fut = as_offline(pol)
    if fut is not None:
        fut.set_future(trace.next_use)
    misses = 0
    for _ in range(2 if twice else 1):
        if fused:
            misses += pol.replay_object(iter(trace.requests) if twice else trace.requests, cap, clock)
        else:
            misses += Policy.replay_object(pol, trace.requests, cap, clock)
    state = _state(pol)
    drained = [pol.evict(None) for _ in range(len(pol) + 1)]
    return misses, state, drained


@pytest.fixture(params=["native", "python"])
def loops(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test twice: with the compiled replay loops (native/ctxcache_replay*.c) where built, and
    with the Python fused loops alone (``accel.native`` off, as CTXCACHE_NO_NATIVE=1 has it)."""
    saved = accel.native
    if request.param == "native" and not any(n.startswith("replay_") for n in dir(saved)):
        pytest.skip("ctxcache._native is not built, or predates the replay loops (tools/build_native.py)")
    if request.param == "python":
        accel.native = None
    try:
        yield request.param
    finally:
        accel.native = saved


def _same(name: str, trace: Trace, cap: int, params: dict[str, Any], *why: Any) -> None:
    ref = _run(name, trace, cap, False, params)
    got = _run(name, trace, cap, True, params)
    assert got[0] == ref[0], (name, cap, params, *why, "misses")
    assert got[1] == ref[1], (name, cap, params, *why, "state")
    assert got[2] == ref[2], (name, cap, params, *why, "eviction order after the replay")


@pytest.mark.parametrize("name", FUSED)
@pytest.mark.parametrize("seed", range(6))
def test_fused_loop_matches_the_reference(name: str, seed: int, loops: str) -> None:
    rng = random.Random(seed * 7919 + len(name))
    trace = _trace(rng, 400, rng.choice([30, 300, 3000]), dense=seed % 2 == 0)
    for cap in (1, 2, 3, 7, 20, 64, 150):
        if name == "w-tinylfu" and cap < 2:
            continue
        for params in [{}, *VARIANTS.get(name, [])]:
            _same(name, trace, cap, params)


@pytest.mark.parametrize("name", FUSED)
def test_odd_keys_and_a_second_replay(name: str, loops: str) -> None:
    """Keys the compiled loops map through a dict (big, negative, str, and ints equal to floats and
    bools), times that are ints or numpy floats, requests from a generator, and a second replay over
    the state the first one left (not fresh: the Python fused loop, or the reference)."""
    rng = random.Random(len(name))
    base = _trace(rng, 300, 200, dense=False)
    odd: list[Any] = [1 << 40, -3, "a", "b", 1.0, True, (2, 3), 7]
    blocks = [tuple(b if b % 9 else odd[b % len(odd)] for b in r.blocks) for r in base.requests]
    times = [int(r.time) if i % 2 else np.float64(r.time) for i, r in enumerate(base.requests)]
    reqs = [
        Request(time=t, input_length=r.input_length, output_length=1, blocks=bl)
        for r, bl, t in zip(base.requests, blocks, times)
    ]
    for cap in (2, 5, 40):
        for trace in (base, _OddTrace(reqs)):
            _same(name, trace, cap, {}, "odd keys" if trace is not base else "")
            ref = _run(name, trace, cap, False, {}, twice=True)
            got = _run(name, trace, cap, True, {}, twice=True)
            assert got[:2] == ref[:2], (name, cap, "second replay")


class _OddTrace(Trace):
    """A trace whose keys need not be ints (no numpy stream); Belady gets a next-use list."""

    def __init__(self, requests: list[Request]) -> None:
        self.requests = requests
        ids = [b for r in requests for b in r.blocks]
        nxt, last = [1 << 62] * len(ids), {}  # type: ignore[var-annotated]
        for i in range(len(ids) - 1, -1, -1):
            nxt[i] = last.get(ids[i], 1 << 62)
            last[ids[i]] = i
        self._next_use = np.array(nxt, dtype=np.int64)

    @property
    def next_use(self) -> np.ndarray:
        return self._next_use


def test_a_subclass_that_changes_a_hook_gets_the_reference_loop() -> None:
    if not FUSED:
        pytest.skip("no fused loop")
    seen: list[Any] = []
    base = POLICIES[FUSED[0]]

    class Spy(base):  # type: ignore[misc, valid-type]
        def on_hit(self, key: Any) -> None:
            seen.append(key)
            super().on_hit(key)

    pol = make_policy(FUSED[0]) if not base.needs_capacity else base(capacity=4)
    assert pol.fused_ok(base)
    spy = Spy.__new__(Spy)
    spy.__dict__.update(make_policy(FUSED[0], **({"capacity": 4} if base.needs_capacity else {})).__dict__)
    assert not spy.fused_ok(base)
    trace = Trace([Request(time=0.0, input_length=512, output_length=1, blocks=(1, 1, 2, 1))])
    spy.replay_object(trace.requests, 4, _TraceClock())
    assert seen == [1, 1]
