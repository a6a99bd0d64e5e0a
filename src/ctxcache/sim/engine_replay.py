"""A trace replayed through a live ContextCache, as a server drives it: the simulator's check.

``simulate`` models what the engine tells a policy; this runs the engine itself, one memory tier
of 1-byte blocks with no watermarks, each trace block id spread over ``BS`` tokens, so the two can
be compared hit token for hit token (tests/sim/test_sim_mirrors_engine.py,
benchmarks/policies/bench_sim_vs_engine.py).
"""

from __future__ import annotations

from typing import Protocol

from ..cache import ContextCache
from ..policies import Policy
from ..tiers.memory import MemoryTier
from .simulator import Trace
from .traces import MOONCAKE_BLOCK

BS = 4  # engine tokens per trace block


class SettableClock(Protocol):
    t: float

    def __call__(self) -> float: ...


def engine_hit_tokens(trace: Trace, policy: Policy, clock: SettableClock, capacity: int) -> int:
    """Hit tokens of ``trace`` through a ContextCache holding ``capacity`` blocks under ``policy``
    (made with ``clock``, which the replay sets to each request's time): lookup, store the rest,
    release."""
    cache = ContextCache([MemoryTier(capacity, policy, high=1.0, low=1.0)], block_size=BS, clock=clock)
    hit = 0
    try:
        for r in trace.requests:
            clock.t = r.time
            n = len(r.blocks)
            full = n if r.input_length >= n * MOONCAKE_BLOCK else n - 1
            tokens = [t for b in r.blocks for t in (b & 0xFFFF, b >> 16, 7, 9)][: full * BS + (full < n)]
            prompt = cache.prompt(tokens)
            with cache.lookup(prompt) as m:
                hit += min(m.n_blocks * MOONCAKE_BLOCK, r.input_length)
                cache.store(prompt, [b"x"] * (full - m.n_blocks), first_block=m.n_blocks)
    finally:
        cache.close()
    return hit
