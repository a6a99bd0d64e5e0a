"""The simulator's object-semantics loop through a policy's public methods: the reference that
``Policy.replay_object`` runs and that each policy's fused loop must match (docs/ARCHITECTURE.md,
"Fused simulator loops"; tests/sim/test_replay_fused.py). Also the entry to the compiled loops
(``native_replay``)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Protocol

from .. import accel


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


def native_replay(name: str, requests: Iterable[Any], clock: Any, *args: Any) -> tuple[Any, Iterable[Any]]:
    """Run ``_native.replay_<name>(requests, *args)`` (native/ctxcache_replay*.c: the policy's loop
    over a fresh instance, its containers, passed in ``args``, filled as the reference leaves them)
    when the compiled module is built and on. Returns (its answer, the requests as a list), or
    (None, the requests) when it is off or declined (a key or time it does not take), and then the
    caller runs its Python loop over the list it got back; nothing was changed."""
    fn = getattr(accel.native, "replay_" + name, None)
    if fn is None:
        return None, requests
    reqs = requests if isinstance(requests, list) else list(requests)
    out = fn(reqs, *args)
    if out is not None and reqs:
        clock.t = reqs[-1].time
    return out, reqs
