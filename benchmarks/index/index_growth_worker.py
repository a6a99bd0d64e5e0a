"""One tree's run for bench_index_growth.py: grow a memory-tier cache block by block, timing each op.

Run by the orchestrator in a fresh process with PYTHONPATH pointing at the tree under test (today's
code or the new one), so both import ``ctxcache`` the same way. Prints one JSON object on stdout;
a progress bar goes to stderr.

Workload (the issue's): 16-token blocks, tiny payloads, one store per new prompt (a random earlier
prompt plus one new block, so each store adds exactly one block), then a lookup of a random earlier
prompt. Prompts are at most ``MAX_DEPTH`` blocks deep and their tokens are derived from their id, so
the driver's own memory is a few preallocated arrays, measured before the cache starts to grow.

A noise floor: after each lookup the same driver times an op whose work never varies
(``constant_work``, a fixed pure-Python loop of about a store's p50, allocating nothing that
lasts), so its p99.9/p50 is what this machine and interpreter give with no variation in the work.
Store and lookup latency is also split by prompt depth (1-8 blocks), the part of their spread that
comes from the work itself.

Each op's thread rusage is read just outside its timed window (about 0.6 µs a read, not timed): a
kept stall's cause gives its user/sys time, page faults and context switches (index_growth_stalls),
and the constant-work op keeps its own longest ops, so a CPU stall of the cache can be set beside
what the machine alone does to work that never varies.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
from typing import Any

import numpy as np
from index_growth_memory import structure_bytes
from index_growth_stalls import GcLog, Stalls, watched_dicts

BS, MAX_DEPTH, PAYLOAD = 16, 8, b"x"
SAT = 2**32 - 1  # per-op arrays are uint32 ns: an op over 4.29 s saturates (stalls keep the exact value)
NOISE_LOOP = 800  # iterations of constant_work: ~20 µs here, about a store's p50
RSS_LIMIT = int(6.8 * (1 << 30))  # stop early rather than pass the machine's per-process budget


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def constant_work() -> int:
    x = 0
    for i in range(NOISE_LOOP):
        x += i
    return x


def prompt_tokens(i: int, parent: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Block j's tokens are ``base + BS * j``: a prompt is its ancestors' blocks, root first."""
    path = []
    j = i
    while j >= 0:
        path.append(j)
        j = int(parent[j])
    path.reverse()
    return (np.array(path, dtype=np.int32)[:, None] * BS + base).ravel()


def decade_edges(n: int) -> list[int]:
    edges = [0, 1000]
    while edges[-1] < n:
        edges.append(edges[-1] * 10)
    edges[-1] = n
    return edges


def percentiles(a: np.ndarray) -> dict[str, float]:
    if not len(a):
        return {}
    p = np.percentile(a, [50, 99, 99.9])
    return {"p50": p[0] / 1e3, "p99": p[1] / 1e3, "p99.9": p[2] / 1e3, "max": float(a.max()) / 1e3, "n": len(a)}


def decades(n: int) -> list[tuple[int, int]]:
    """The non-empty [lo, hi) block ranges of each decade up to ``n``."""
    edges = decade_edges(n)
    return [(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo]


def summarize(lat: dict[str, np.ndarray], n: int) -> list[dict[str, Any]]:
    """Per decade of blocks: p50/p99/p99.9/max (µs) for each op and clock."""
    out = []
    for lo, hi in decades(n):
        row: dict[str, Any] = {"from": lo, "to": hi}
        for name, a in lat.items():
            row[name] = percentiles(a[lo:hi])
        out.append(row)
    return out


def by_depth(lat: dict[str, np.ndarray], depths: dict[str, np.ndarray], n: int) -> list[dict[str, Any]]:
    """Per decade, store and lookup p50/p99.9 (µs) by prompt depth in blocks (1..MAX_DEPTH)."""
    out = []
    for lo, hi in decades(n):
        row: dict[str, Any] = {"from": lo, "to": hi}
        for name, a in lat.items():
            op = name.split("_")[0]
            if op not in depths:
                continue
            d = depths[op][lo:hi]
            row[name] = {}
            for blocks in range(1, MAX_DEPTH + 1):
                sel = a[lo:hi][d == blocks - 1]
                if len(sel) >= 100:
                    p = np.percentile(sel, [50, 99.9])
                    row[name][str(blocks)] = {"p50": round(p[0] / 1e3, 2), "p99.9": round(p[1] / 1e3, 2), "n": len(sel)}
        out.append(row)
    return out


def progress(i: int, n: int, t_start: float, label: str) -> None:
    frac = i / n
    bar = "#" * int(30 * frac)
    el = time.monotonic() - t_start
    eta = el / frac - el if frac else 0.0
    sys.stderr.write(f"\r{label:>8} [{bar:<30}] {frac:6.1%} {i:>11,} blocks  {el:6.0f}s  eta {eta:5.0f}s")
    sys.stderr.flush()


def run(n: int, label: str, seed: int = 0, max_seconds: float = float("inf")) -> dict[str, Any]:
    from ctxcache import ContextCache

    cache = ContextCache.from_config({"block_size": BS, "tiers": [{"kind": "memory", "capacity": "64GiB"}]})
    rng = np.random.default_rng(seed)
    parent = np.full(n, -1, dtype=np.int32)
    depth = np.zeros(n, dtype=np.int8)
    look_depth = np.zeros(n, dtype=np.int8)  # depth of the prompt looked up at step i
    names = ("store_wall", "store_cpu", "lookup_wall", "lookup_cpu", "noise_wall", "noise_cpu")
    lat = {k: np.ones(n, dtype=np.uint32) for k in names}
    base = np.arange(BS, dtype=np.int32)
    # What a server does once started: collect and freeze what imports and set-up made, so full
    # collections during the run scan only what the run itself keeps (the index's cost, if any).
    gc.collect()
    gc.freeze()
    gclog = GcLog()
    stalls, noise = Stalls(gclog, watched_dicts(cache)), Stalls(gclog)
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    # Read just outside each timed window, so it attributes a stall without adding to its time.
    ru, me = resource.getrusage, resource.RUSAGE_THREAD
    rss0 = rss()
    rss_at: dict[int, int] = {}
    mem_at: dict[int, dict[str, Any]] = {}
    marks = set(decade_edges(n)[1:])
    chunk, t_start, i, stopped = 65536, time.monotonic(), 0, ""
    while i < n:
        pick = rng.random(chunk)
        look = rng.random(chunk)
        fresh = rng.random(chunk) < 1 / MAX_DEPTH  # a new conversation: a root block
        for r, q, f in zip(pick, look, fresh):
            if i >= n:
                break
            j = int(r * i) if i else -1
            if j >= 0 and depth[j] < MAX_DEPTH - 1 and not f:
                parent[i], depth[i] = j, depth[j] + 1
            toks = prompt_tokens(i, parent, base)
            d = int(depth[i])
            r0 = ru(me)
            c0, w0 = cpu(), wall()
            cache.store(toks, [PAYLOAD], first_block=d)
            w1, c1 = wall(), cpu()
            r1 = ru(me)
            lat["store_wall"][i], lat["store_cpu"][i] = min(w1 - w0, SAT), min(c1 - c0, SAT)
            stalls.note("store", i + 1, w0, w1 - w0, c1 - c0, r0, r1)
            k = int(q * (i + 1))
            look_depth[i] = depth[k]
            toks = prompt_tokens(k, parent, base)
            r0 = ru(me)
            c0, w0 = cpu(), wall()
            m = cache.lookup(toks)
            cache.release(m)
            w1, c1 = wall(), cpu()
            r1 = ru(me)
            lat["lookup_wall"][i], lat["lookup_cpu"][i] = min(w1 - w0, SAT), min(c1 - c0, SAT)
            stalls.note("lookup", i + 1, w0, w1 - w0, c1 - c0, r0, r1)
            if m.hit_tokens != len(toks):
                raise AssertionError(f"prompt {k} should hit fully: {m.hit_tokens} of {len(toks)} tokens")
            r0 = ru(me)
            c0, w0 = cpu(), wall()
            constant_work()
            w1, c1 = wall(), cpu()
            r1 = ru(me)
            lat["noise_wall"][i], lat["noise_cpu"][i] = min(w1 - w0, SAT), min(c1 - c0, SAT)
            noise.note("noise", i + 1, w0, w1 - w0, c1 - c0, r0, r1)
            i += 1
            if i in marks or i % 100_000 == 0:
                now = rss()
                if i in marks:
                    rss_at[i] = now - rss0
                    mem_at[i] = structure_bytes(cache)
                over = now > RSS_LIMIT or time.monotonic() - t_start > max_seconds
                if over:
                    why = f"RSS {now / 2**30:.2f} GiB" if now > RSS_LIMIT else f"{max_seconds:.0f} s budget"
                    stopped = f"{why}: stopped at {i:,} of {n:,} blocks"
                    sys.stderr.write(f"\n{label}: {stopped}\n")
                    n = i
                    rss_at[i] = now - rss0
                    mem_at[i] = structure_bytes(cache)
                    break
        progress(i, n, t_start, label)
    sys.stderr.write("\n")
    gc.callbacks.remove(gclog)
    assert len(cache._engine.index) == n, "every store should add exactly one block"
    out = report(lat, n, rss_at, (stalls, noise), gclog, time.monotonic() - t_start)
    out["by_depth"] = by_depth({k: v[:n] for k, v in lat.items()}, {"store": depth[:n], "lookup": look_depth[:n]}, n)
    out["memory_by_structure"] = {str(b): v for b, v in sorted(mem_at.items())}
    out["noise_op"] = f"constant_work(): a {NOISE_LOOP}-iteration pure-Python loop, timed after each lookup"
    out["stopped_early"] = stopped
    return out


def report(
    lat: dict[str, np.ndarray],
    n: int,
    rss_at: dict[int, int],
    kept: tuple[Stalls, Stalls],
    gclog: GcLog,
    secs: float,
) -> dict[str, Any]:
    stalls, noise = kept
    lat = {k: v[:n] for k, v in lat.items()}
    decades = summarize(lat, n)
    unsaturate(decades, stalls.top() + stalls.top(by_cpu=True) + noise.top() + noise.top(by_cpu=True))
    return {
        "blocks": n,
        "seconds": round(secs, 1),
        "decades": decades,
        "rss_bytes_per_block": {str(b): round(v / b, 1) for b, v in sorted(rss_at.items())},
        "stalls_top_wall": stalls.top(),
        "stalls_top_cpu": stalls.top(by_cpu=True),
        "stalls_over_10ms": stalls.n_over_10ms,
        "cpu_stalls_over_10ms": stalls.n_cpu_over_10ms,
        # The constant-work op's own longest ops: what the machine alone does to an op that never varies.
        "noise_top_wall": noise.top(),
        "noise_top_cpu": noise.top(by_cpu=True),
        "noise_over_10ms": {"cpu": noise.n_cpu_over_10ms, "wall": noise.n_over_10ms},
        "gc": {
            "count": gclog.count,
            "max_ms": [x / 1e6 for x in gclog.max_ns],
            "total_s": [x / 1e9 for x in gclog.total_ns],
        },
        "gc_tracked_objects_at_end": len(gc.get_objects()),
    }


def unsaturate(decades: list[dict[str, Any]], kept: list[dict[str, Any]]) -> None:
    """A saturated per-decade max takes its exact value from the kept stalls."""
    for row in decades:
        for k, v in row.items():
            if isinstance(v, dict) and v and v["max"] >= SAT / 1e3:
                op, clock = k.split("_")
                key = "wall_ms" if clock == "wall" else "cpu_ms"
                hits = [s[key] for s in kept if s["op"] == op and row["from"] < s["blocks"] <= row["to"]]
                v["max"] = max(hits, default=v["max"] / 1e3) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-blocks", type=int, default=10_000_000)
    ap.add_argument("--label", default="tree")
    ap.add_argument("--max-seconds", type=float, default=float("inf"), help="stop (at a 100k mark) after this")
    args = ap.parse_args()
    import ctxcache

    out = run(args.max_blocks, args.label, max_seconds=args.max_seconds)
    out["ctxcache"] = os.path.dirname(ctxcache.__file__)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
