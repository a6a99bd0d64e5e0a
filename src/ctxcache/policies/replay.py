"""The simulator's object-semantics loop through a policy's public methods: the reference that
``Policy.replay_object`` runs and that each policy's fused loop must match (docs/ARCHITECTURE.md,
"Fused simulator loops"; tests/sim/test_replay_fused.py)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Protocol


class Replayable(Protocol):  # the Policy methods the loop calls (base.py imports this module)
    def __contains__(self, key: object) -> bool: ...
    def on_hit(self, key: Hashable) -> None: ...
    def on_insert(self, key: Hashable) -> None: ...
    def evict(self, can_evict: Any = None) -> Hashable | None: ...


def replay_reference(policy: Replayable, fut: Any, requests: Iterable[Any], capacity: int, clock: Any) -> int:
    """``Policy.replay_object``'s contract, one method call per step; returns the misses. ``fut``:
    the policy's ``Offline`` view (its ``position`` set before each access), or None."""
    contains, hit, insert, evict = policy.__contains__, policy.on_hit, policy.on_insert, policy.evict
    misses = 0
    resident = 0
    if fut is not None:  # two copies of the loop: LRU/FIFO run it at ~1x a bare OrderedDict loop,
        i = 0  # and a per-access ``if fut`` would be paid by every access of theirs (not measured)
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
