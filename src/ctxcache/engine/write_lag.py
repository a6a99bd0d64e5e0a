"""``write_lag``: with write-through tiers, a store returns only once the mover is at most
``write_lag`` seconds behind, so a SIGKILL loses at most that window of stores.

Why a bound and not only a queue: write-through copies are written off the request path, so when
the tiers write slower than requests store (a busy disk, a far Redis), RAM runs ahead of them and
what a SIGKILL loses grows with the backlog (4-5 s of stores on a loaded host,
benchmarks/tiers/bench_write_through.py). Stores then wait, outside the lock, until the backlog is
back within the bound: under overload they slow to what the tiers write.

"Behind" is the larger of the mover's lag (the oldest unfinished move's age) and the time its
unfinished moves will take at the recent pace (``Mover.per_move``): waiting on the lag alone let
the half-second of stores before it crossed the bound queue several seconds of writes, all lost
to a kill during the wait. A wait is capped at 5x ``write_lag`` (at least 5 s): a hung tier is its
health check's to catch, not every request's; a wait that gives up is counted (``overruns``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Engine
    from .mover import Mover


def behind_s(mover: Mover) -> float:
    """Seconds a move queued now waits before it lands (caller holds the lock). A batch in flight
    for longer than the recent pace says gives a slower one: before the first batch lands there
    is no pace at all, and a fast writer queued 2,000 moves (3 s of a 40 ms-a-batch disk) in the
    first batch's 40 ms, then waited those 3 s, all lost to a kill meanwhile."""
    per = mover.per_move
    if mover.busy:
        per = max(per, (time.monotonic() - mover.taken_at) / mover.busy)
    return max(mover.lag_s(), (len(mover.queue) + mover.busy) * per)


def wait(e: Engine) -> None:
    """After a store queued write-through copies: wait while the mover is more than
    ``e.write_lag`` behind. A manual mover (the simulation steps it) is never waited for: its
    pace is not real time."""
    mover, limit = e.placement.mover, e.write_lag
    if mover.manual:
        return
    with e.lock:
        late = behind_s(mover) > limit
        if late:
            e.counters.write_lag_waits += 1
    if late and not mover.wait_for(lambda: behind_s(mover) <= limit, max(5.0, 5 * limit)):
        with e.lock:
            e.counters.write_lag_overruns += 1
