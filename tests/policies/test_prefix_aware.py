"""Behaviour of the prefix-aware policy: what it learns, leaf-first eviction, cost weighting."""

from __future__ import annotations

import pytest

from ctxcache.errors import ConfigError
from ctxcache.index import RadixIndex
from ctxcache.policies import make_policy
from ctxcache.policies.prefix_aware import PrefixAware
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import Request

from ..conftest import FakeClock


def _hot_cold_run(policy_spec: str | dict[str, object], capacity: int = 30) -> tuple[float, float]:
    """10 hot keys re-used every 6 s among 5 one-hit keys per second (object semantics, no attach).

    Returns the hot-key hit ratio in the first and the second half. With 40 distinct keys between
    two uses of a hot key and room for 30, recency alone never keeps a hot key. (The gap has to be
    within ``horizon`` x the LRU characteristic time, here 1.5 x 6 s: a class reused later than that
    is never seen to pay off; see docs/prefix-aware.md.)"""
    clock = FakeClock()
    pol = make_policy(policy_spec, clock=clock)
    cold = iter(range(1000, 10**7))
    hits = [0, 0]
    uses = [0, 0]
    seconds = 4000
    for t in range(seconds):
        clock.t = float(t)
        keys = [next(cold) for _ in range(5)]
        if t % 6 == 0:
            keys += list(range(10))
        half = 0 if t < seconds // 2 else 1
        for k in keys:
            if k in pol:
                pol.on_hit(k)
                if k < 10:
                    hits[half] += 1
            else:
                if len(pol) >= capacity:
                    assert pol.evict() is not None
                pol.on_insert(k)
            if k < 10:
                uses[half] += 1
    return hits[0] / uses[0], hits[1] / uses[1]


def test_learns_to_keep_the_reused_class_and_drop_one_hit_wonders():
    _, lru_late = _hot_cold_run("lru")
    assert lru_late == 0.0  # the stream defeats recency
    _, pa_late = _hot_cold_run({"name": "prefix-aware", "warmup": 100, "update_every": 64})
    assert pa_late > 0.8


def test_is_lru_before_it_has_learned():
    clock = FakeClock()
    pol = PrefixAware(clock=clock)
    for k in range(20):
        pol.on_insert(k)
        clock.advance(1)
    pol.on_hit(0)
    assert [pol.evict() for _ in range(3)] == [1, 2, 3]


def _chain(idx: RadixIndex, pol: PrefixAware, keys: list[int], hit: int = 0) -> None:
    """Index a request's chain (the first ``hit`` keys already there) and notify like the simulator."""
    for depth in range(hit, len(keys)):
        idx.insert(keys[depth], keys[depth - 1] if depth else None, b"", depth)
    for depth in range(len(keys) - 1, hit - 1, -1):
        pol.on_insert(keys[depth])
    for depth in range(hit - 1, -1, -1):
        pol.on_hit(keys[depth])


def test_evicts_only_evictable_leaves_deepest_first():
    clock = FakeClock()
    idx = RadixIndex()
    pol = PrefixAware(clock=clock)
    pol.attach(idx)
    _chain(idx, pol, [1, 2, 3, 4])  # the oldest chain: its root is the oldest block
    clock.advance(5)
    _chain(idx, pol, [1, 2, 3, 4, 5, 6], hit=4)  # a continuation: 1..4 hit again, 5, 6 new
    clock.advance(5)
    _chain(idx, pol, [10, 11])
    clock.advance(5)
    order = []
    while (victim := pol.evict(idx.is_evictable)) is not None:
        node = idx.get(victim)
        assert node is not None and node.children == 0  # a leaf, never an interior block
        idx.remove(victim)
        order.append(victim)
    assert order == [6, 5, 4, 3, 2, 1, 11, 10] and len(pol) == 0 and len(idx) == 0


def test_pinned_leaf_is_skipped_then_evicted_when_released():
    clock = FakeClock()
    idx = RadixIndex()
    pol = PrefixAware(clock=clock)
    pol.attach(idx)
    _chain(idx, pol, [1, 2])
    clock.advance(1)
    _chain(idx, pol, [7])
    node = idx.get(2)
    assert node is not None
    idx.pin([node])
    assert pol.evict(idx.is_evictable) == 7  # 2 is older but pinned
    idx.remove(7)
    assert pol.evict(idx.is_evictable) is None
    idx.unpin([node])
    assert pol.evict(idx.is_evictable) == 2


@pytest.mark.parametrize(("cost_weight", "victim"), [(0.0, 20), (1.0, 30)])
def test_cost_weight_protects_deep_blocks(cost_weight, victim):
    """With learned curves that rate both classes alike, recompute cost decides: a deep leaf (key 20,
    depth 20, the oldest) costs more prefill to rebuild than a shallow one (key 30, depth 0)."""
    clock = FakeClock()
    idx = RadixIndex()
    pol = PrefixAware(clock=clock, cost_weight=cost_weight)
    pol.attach(idx)
    _chain(idx, pol, list(range(21)))
    clock.advance(1)
    _chain(idx, pol, [30])
    clock.advance(1)
    _chain(idx, pol, [30], hit=1)  # 30 now has count 2: another class than 20
    pol._learned = True  # flat learned curves (every class and age alike): isolate the cost term
    assert pol.peek(idx.is_evictable) == victim
    assert pol.evict(idx.is_evictable) == victim


def test_request_context_classes_and_params():
    pol = PrefixAware(new_edges=(4, 1), shared_count=8, cost_weight=0.5)
    assert pol.params()["new_edges"] == [1, 4]
    assert len(pol._heaps) == pol.max_count * 3 * 2  # count x added-blocks bucket x continuation
    assert make_policy({"name": "prefix-aware", "horizon": 2.0}).params()["horizon"] == 2.0
    for bad in ({"cost_weight": -1}, {"margin": 0}, {"decay": 1.5}, {"max_count": 0}, {"horizon": 0}):
        with pytest.raises(ConfigError, match="prefix-aware"):
            make_policy({"name": "prefix-aware", **bad})


def _requests() -> list[Request]:
    """Sessions that re-send growing histories among one-off documents."""
    reqs = []
    next_id = 10_000
    for s in range(40):
        hist = list(range(s * 100, s * 100 + 3))
        for turn in range(6):
            t = s * 30.0 + turn * 20.0
            reqs.append(Request(t, len(hist) * 512 + 100, 10, (*hist, 999_000 + s * 10 + turn)))
            hist = hist + [s * 100 + 3 + turn * 2, s * 100 + 4 + turn * 2]
        doc = tuple(range(next_id, next_id + 12))
        next_id += 12
        reqs.append(Request(s * 30.0 + 5, 12 * 512, 10, doc))
    reqs.sort(key=lambda r: r.time)
    return reqs


@pytest.mark.parametrize("semantics", ["prefix", "object"])
def test_runs_in_the_simulator_with_and_without_attach(semantics):
    trace = Trace(_requests())
    cap = trace.capacity(0.1)
    res = simulate(trace, {"name": "prefix-aware", "warmup": 50, "update_every": 32}, cap, semantics=semantics)
    lru = simulate(trace, "lru", cap, semantics=semantics)
    assert 0 < res.misses <= lru.misses
