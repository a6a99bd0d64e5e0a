"""W-TinyLFU's ``replay_object`` (the simulator's object semantics): the compiled loop
(native/ctxcache_replay_wtinylfu.c) for a fresh instance with a capacity whose keys are ints, else
the reference loop (docs/ARCHITECTURE.md, "Fused simulator loops"). Its own module: wtinylfu.py
stands at the layout's 400 lines."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import Policy
from .replay import native_replay

# The internals the compiled loop stands in for: a subclass that redefines one gets the reference.
INLINED = ("_indices", "_add", "_estimate", "_to_main", "_main_victim", "_evict_fast", "_evict_general", "_sizes")


def replay(pol: Any, owner: type, requests: Iterable[Any], capacity: int, clock: Any) -> int:
    """``WTinyLFU.replay_object`` (``owner``: the class, for ``fused_ok``); same misses, same state."""
    if pol._fixed is not None and fresh(pol) and pol.fused_ok(owner, *INLINED):
        args = (capacity, pol._fixed, pol._width, pol._depth, pol._halve_at, pol._fast, pol._door is not None)
        queues = (pol._win, pol._prob, pol._prot, pol._doomed, pol._idx)
        out, requests = native_replay("wtinylfu", requests, clock, *args, *queues)
        if out is not None:
            misses, pol._counts, pol._door, pol._main_hits, pol._mv, pol._blocks, pol._top, pol._strikes = out
            return int(misses)
    return Policy.replay_object(pol, requests, capacity, clock)


def fresh(pol: Any) -> bool:
    """Nothing replayed or inserted yet: the compiled loop starts from empty queues and sketch."""
    used = pol._win or pol._prob or pol._prot or pol._doomed or pol._idx or pol._blocks or pol._main_hits
    untouched = pol._mv is None and pol._top == -1 and not any(pol._counts)
    return not used and untouched and not any(pol._door or b"")
