"""The simulator tells a policy what the live engine tells it, in the engine's order.

``ContextCache.lookup`` counts a request's hits and pins its prefix before ``store`` makes room and
admits the new blocks; the simulator must do the same, or its numbers describe another cache (it
used to report the hits after the store: LRU's hit tokens on the conversation trace's head were
3.6 % lower than the engine's at 1/5 of the unique blocks). benchmarks/policies/bench_sim_vs_engine.py
runs the same comparison for every online policy.
"""

from __future__ import annotations

import pytest

from ctxcache.cli import default_trace
from ctxcache.policies import make_policy
from ctxcache.policies.lfu import LFU
from ctxcache.sim.engine_replay import engine_hit_tokens
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import MOONCAKE_BLOCK, Request, read_mooncake

from ..conftest import FakeClock


@pytest.mark.parametrize("name", ["lru", "lirs"])
def test_the_simulator_and_the_engine_hit_the_same_tokens(name: str) -> None:
    trace = Trace(list(read_mooncake(default_trace(), limit=1500)))
    cap = trace.unique_blocks // 5
    sim = simulate(trace, make_policy(name, clock=FakeClock()), cap)
    clock = FakeClock()
    assert sim.hit_tokens == engine_hit_tokens(trace, make_policy(name, clock=clock), clock, cap)


def test_a_request_uses_its_hit_prefix_once() -> None:
    # Room for 2. The third request hits block 1 and needs room for block 3: lfu's victim search
    # meets 1 (count 1, the oldest) pinned. Counted as hit first, 1 is no longer the lowest and is
    # not asked; counted after the store, its refusal and then its hit made one request two uses.
    reqs = [Request(float(t), len(b) * MOONCAKE_BLOCK, 1, b) for t, b in enumerate([(1,), (2,), (1, 3)])]
    pol = LFU()
    simulate(Trace(reqs), pol, 2)
    assert 2 not in pol
    assert pol._count[1] == 2  # inserted, then hit once
