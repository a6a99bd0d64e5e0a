"""Stall attribution for index_growth_worker.py: the longest ops, each with what caused it.

Kept apart from the worker's timing loop so the loop stays short; nothing here runs inside a timed
window (``Stalls.note`` is called after both clocks are read).
"""

from __future__ import annotations

import gc
import heapq
import resource
import sys
import time
from typing import Any

Rusage = resource.struct_rusage

STALL_NS = 1_000_000  # ops slower than this (wall) are kept as stalls, with what caused them
TOP = 10
TICK_MS = 4  # CONFIG_HZ=250 on these machines: the grain of the kernel's user/sys split
MANY_FAULTS = 1000  # minor faults at ~1 µs each: a millisecond of the kernel's work


class GcLog:
    """Collections seen through gc.callbacks: counts and time per generation, and the last one."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total_ns = [0, 0, 0]
        self.max_ns = [0, 0, 0]
        self.last: tuple[int, int, int] = (0, 0, -1)  # (start, stop, generation)
        self._t0 = 0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        now = time.perf_counter_ns()
        if phase == "start":
            self._t0 = now
            return
        g = info["generation"]
        d = now - self._t0
        self.count[g] += 1
        self.total_ns[g] += d
        self.max_ns[g] = max(self.max_ns[g], d)
        self.last = (self._t0, now, g)


def watched_dicts(cache: Any) -> dict[str, Any]:
    """The big per-block containers of the store path, where they are plain dicts (today's tree),
    so a stall can be matched to a resize. Sharded maps are not probed (their resizes are small)."""
    e = cache._engine
    cands = {
        "index._nodes": getattr(e.index, "_nodes", None),
        "index._evictable": getattr(e.index, "_evictable", None),
        "tier._data": getattr(e.tiers[0], "_data", None),
        "tier._sizes": getattr(e.tiers[0], "_sizes", None),
        "slot.owners": getattr(e.slots[0], "owners", None),
        "policy._order": getattr(e.slots[0].policy, "_order", None),
    }
    return {k: v for k, v in cands.items() if isinstance(v, dict)}


class Stalls:
    """The longest ops by wall clock and by CPU time, each with its cause, and counts of ops over 10 ms."""

    def __init__(self, gclog: GcLog, watched: dict[str, Any] | None = None) -> None:
        self.heap: list[tuple[int, int, dict[str, Any]]] = []
        self.cpu_heap: list[tuple[int, int, dict[str, Any]]] = []
        self.n_over_10ms = 0
        self.n_cpu_over_10ms = 0
        self.gclog = gclog
        names = watched or {}
        self.names, self.objs = list(names), list(names.values())
        self.sizes = [sys.getsizeof(o) for o in self.objs]
        self._seq = 0

    def probe(self) -> list[str]:
        """Containers whose allocation changed since the last probe (a resize)."""
        out = []
        for i, o in enumerate(self.objs):
            s = sys.getsizeof(o)
            if s != self.sizes[i]:
                out.append(f"{self.names[i]} resized at {len(o):,} entries")
                self.sizes[i] = s
        return out

    def note(self, op: str, blocks: int, t0: int, wall: int, cpu: int, r0: Rusage, r1: Rusage) -> None:
        """Keep the op if it is a stall; ``r0``/``r1`` are the thread's rusage just outside its window."""
        resized = self.probe() if self.objs else []
        # Short ops are kept only while they are among the 10 longest by CPU: the constant-work op's
        # are all short, and its longest by CPU is what the machine alone adds to fixed work.
        floor = self.cpu_heap[0][0] if len(self.cpu_heap) == TOP else -1
        if wall < STALL_NS and cpu < STALL_NS // 4 and cpu <= floor:
            return
        self.n_over_10ms += wall > 10_000_000
        self.n_cpu_over_10ms += cpu > 10_000_000
        start, stop, gen = self.gclog.last
        causes = []
        if stop >= t0 and gen >= 0:
            causes.append(f"gc gen{gen} {(stop - start) / 1e6:.1f} ms")
        causes += resized
        ru = rusage_delta(r0, r1)
        if cpu < wall // 2:
            causes.append(f"not running (cpu {cpu / 1e6:.2f} ms of {wall / 1e6:.2f} ms wall: preempted/paging)")
        elif not causes:
            causes.append(verdict(ru))
        causes.append(describe(ru))
        item = {"op": op, "blocks": blocks, "wall_ms": wall / 1e6, "cpu_ms": cpu / 1e6, "cause": "; ".join(causes)}
        item["rusage"] = ru
        self._seq += 1
        for heap, t in ((self.heap, wall), (self.cpu_heap, cpu)):
            if len(heap) < TOP:
                heapq.heappush(heap, (t, self._seq, item))
            else:
                heapq.heappushpop(heap, (t, self._seq, item))

    def top(self, by_cpu: bool = False) -> list[dict[str, Any]]:
        return [e[2] for e in sorted(self.cpu_heap if by_cpu else self.heap, key=lambda e: -e[0])]


def rusage_delta(r0: Rusage, r1: Rusage) -> dict[str, float]:
    """What the kernel charged the thread between two ``getrusage(RUSAGE_THREAD)`` calls.

    Faults and switches are exact counts. User and sys time are not: the kernel brings a running
    thread's total up to date only at a tick or a switch, and splits it by tick samples, so both
    are good to about a tick (``TICK_MS``) at each end; ``thread_time_ns`` stays the precise figure.
    """
    return {
        "user_ms": round((r1.ru_utime - r0.ru_utime) * 1e3, 3),
        "sys_ms": round((r1.ru_stime - r0.ru_stime) * 1e3, 3),
        "minflt": r1.ru_minflt - r0.ru_minflt,
        "majflt": r1.ru_majflt - r0.ru_majflt,
        "nvcsw": r1.ru_nvcsw - r0.ru_nvcsw,
        "nivcsw": r1.ru_nivcsw - r0.ru_nivcsw,
    }


def describe(ru: dict[str, float]) -> str:
    return (
        f"user {ru['user_ms']:.1f} ms, sys {ru['sys_ms']:.1f} ms, {ru['minflt']:,.0f} minor + "
        f"{ru['majflt']:,.0f} major faults, {ru['nvcsw']:,.0f} vol + {ru['nivcsw']:,.0f} invol switches"
    )


def verdict(ru: dict[str, float]) -> str:
    """Where a CPU-bound op's time went, when no collection or resize explains it.

    User-mode time with no faults is our code, or time the kernel charges to whichever thread was
    running (interrupts: this kernel has no IRQ_TIME_ACCOUNTING; host steal it is not told of):
    the constant-work op's own stalls show how much of that the machine alone gives.
    """
    if ru["majflt"]:
        return "kernel: major page faults (disk reads)"
    if ru["minflt"] >= MANY_FAULTS:
        return f"kernel: {ru['minflt']:,.0f} minor page faults"
    if ru["user_ms"] + ru["sys_ms"] < 2 * TICK_MS:
        return "unattributed CPU work (too short for the tick-sampled user/sys split)"
    if ru["sys_ms"] > ru["user_ms"]:
        return "kernel: mostly sys time"
    return "unattributed user-mode CPU work"


def longest(tree: dict[str, Any], op: str, clock: str) -> float | None:
    """The longest op (ms) of ``op`` in a saved tree, from its per-decade maxima (saturation fixed)."""
    maxima = [r[f"{op}_{clock}"]["max"] for r in tree["decades"] if r.get(f"{op}_{clock}")]
    return max(maxima) / 1e3 if maxima else None


def floor_summary(tree: dict[str, Any]) -> dict[str, Any]:
    """The constant-work op next to store and lookup: ops over 10 ms and the longest, per clock.

    Runs saved before the worker kept the noise op's stalls have no counts: those read "n/a".
    """
    noise_counts = tree.get("noise_over_10ms", "n/a")
    top = tree.get("noise_top_cpu")
    return {
        "ops_over_10ms": {
            "store_lookup": {"cpu": tree["cpu_stalls_over_10ms"], "wall": tree["stalls_over_10ms"]},
            "noise_floor": noise_counts,
        },
        "noise_floor_longest_ms": {"cpu": longest(tree, "noise", "cpu"), "wall": longest(tree, "noise", "wall")},
        "noise_floor_longest_cpu_op": top[0] if top else "n/a",
    }


def fmt(x: Any, spec: str = ",") -> str:
    return "n/a" if x is None or x == "n/a" else format(x, spec)


def table(trees: dict[str, dict[str, Any]], worst: int = 5) -> str:
    """Human-readable: ops over 10 ms and the longest op per tree, then each tree's longest CPU ops
    with their causes, the constant-work op's beside store's and lookup's."""
    lines = [f"{'tree':<18} {'op':<14} {'>10ms cpu':>10} {'>10ms wall':>11} {'max cpu ms':>11} {'max wall ms':>12}"]
    for t in trees.values():
        f = floor_summary(t)
        sl, nf = f["ops_over_10ms"]["store_lookup"], f["ops_over_10ms"]["noise_floor"]
        nf = nf if isinstance(nf, dict) else {"cpu": "n/a", "wall": "n/a"}
        rows = [
            ("store+lookup", sl, [longest(t, o, "cpu") for o in ("store", "lookup")], ("store", "lookup")),
            ("constant-work", nf, [longest(t, "noise", "cpu")], ("noise",)),
        ]
        for name, counts, cpus, ops in rows:
            walls = [w for w in (longest(t, o, "wall") for o in ops) if w is not None]
            mx_cpu = max((c for c in cpus if c is not None), default=None)
            lines.append(
                f"{t.get('tree', '?'):<18} {name:<14} {fmt(counts['cpu']):>10} {fmt(counts['wall']):>11} "
                f"{fmt(mx_cpu, ',.1f'):>11} {fmt(max(walls, default=None), ',.1f'):>12}"
            )
    for t in trees.values():
        for key, what in (("stalls_top_cpu", "store/lookup"), ("noise_top_cpu", "constant-work")):
            lines.append(f"{t.get('tree', '?')}: longest {what} ops by CPU")
            kept = t.get(key)
            if kept is None:
                lines.append("  n/a (not recorded by this run)")
            for s in (kept or [])[:worst]:
                lines.append(
                    f"  {s['op']:<6} at {s['blocks']:>11,} blocks  cpu {s['cpu_ms']:8.2f} ms  "
                    f"wall {s['wall_ms']:8.2f} ms  {s['cause']}"
                )
    return "\n".join(lines)
