"""The simulator's object-semantics loop through a policy's public methods: the reference that
``Policy.replay_object`` runs and that each policy's fused loop must match (docs/ARCHITECTURE.md,
"Fused simulator loops"; tests/sim/test_replay_fused.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import Policy, as_offline


def replay_reference(policy: Policy, requests: Iterable[Any], capacity: int, clock: Any) -> int:
    """``Policy.replay_object``'s contract, one method call per step; returns the misses."""
    contains, hit, insert, evict = policy.__contains__, policy.on_hit, policy.on_insert, policy.evict
    misses = 0
    resident = 0
    if policy.offline:
        fut = as_offline(policy)
        assert fut is not None
        i = 0
        for r in requests:
            clock.t = r.time
            for b in r.blocks:
                fut.position = i
                i += 1
                if contains(b):
                    hit(b)
                    continue
                misses += 1
                if resident >= capacity:
                    evict(None)
                else:
                    resident += 1
                insert(b)
        return misses
    for r in requests:
        clock.t = r.time
        for b in r.blocks:
            if contains(b):
                hit(b)
                continue
            misses += 1
            if resident >= capacity:
                evict(None)
            else:
                resident += 1
            insert(b)
    return misses
