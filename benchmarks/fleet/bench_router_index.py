"""The router's block index at fleet scale: bytes per (block, worker) entry, lookups/s per core,
and the time to rebuild it from events, side by side with a dict-of-bytes index.

    python benchmarks/fleet/bench_router_index.py                      # 1 M and 10 M blocks
    python benchmarks/fleet/bench_router_index.py --sizes 100000       # quick

Blocks are spread over ``--workers`` workers, each block on one (the worst case for bytes per
entry: a block on k workers shares one slot among k entries); requests are 128-block chains
(4k tokens at 32 per block). Times are process CPU time (``time.process_time``): the machine is
shared, and CPU time is this process's own work (wall time is reported beside it).

The prefix query runs twice on the same index and requests: through ctxcache._native's
table_prefix (when built; CTXCACHE_NO_NATIVE=1 leaves only the numpy path) and through the numpy
path; their answers must agree. ``prefix_query_lookups_per_s`` is the path the router runs.

Goals (issue 27): <= 64 B per entry, >= 1 M block lookups/s per core at 10 M blocks, rebuild of
1 M blocks from events <= 5 s. Prints one JSON line; writes benchmarks/results/router_index.json and its plot (.png).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

from ctxcache.events import BlockStored, EventBatch, WorkerStarted
from ctxcache.router.index import BlockIndex
from ctxcache.router.table import key_arrays

ROOT = Path(__file__).resolve().parents[2]
REQ = 128  # blocks per request


def make_keys(n: int, seed: int) -> list[bytes]:
    raw = np.random.default_rng(seed).bytes(16 * n)
    return [raw[i : i + 16] for i in range(0, 16 * n, 16)]


def batches(keys: list[bytes], workers: int) -> list[EventBatch]:
    """What the workers publish: a WorkerStarted, then one BlockStored per 128-block prompt."""
    out = [EventBatch(f"w{w}", "1-a", 1, (WorkerStarted(("memory", "disk")),)) for w in range(workers)]
    seq = [1] * workers
    for i, start in enumerate(range(0, len(keys), REQ)):
        w = i % workers
        seq[w] += 1
        tier = "memory" if i % 4 else "disk"
        out.append(EventBatch(f"w{w}", "1-a", seq[w], (BlockStored(tuple(keys[start : start + REQ]), tier),)))
    return out


def timed(fn: Any) -> tuple[Any, float, float]:
    c, w = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def requests(keys: list[bytes], n: int, seed: int) -> list[list[bytes]]:
    """n request chains: 3 of 4 a stored chain (a hit), 1 of 4 cached for its first half only."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(keys) // REQ, n) * REQ
    out = []
    for i, s in enumerate(starts):
        chain = keys[s : s + REQ]
        out.append(chain if i % 4 else chain[: REQ // 2] + make_keys(REQ // 2, seed + i))
    return out


def bench_array(keys: list[bytes], workers: int, seed: int) -> dict[str, Any]:
    evs = batches(keys, workers)
    idx = BlockIndex(capacity=int(len(keys) / 0.6))
    _, build_cpu, build_wall = timed(lambda: idx.apply_many(evs))
    evs.clear()  # the events are not part of the index: free them before the queries
    stats = idx.stats()
    reqs = requests(keys, 2000, seed)
    native, paths = idx._native, {}
    for name, mod in (("native", native), ("numpy", None)):
        if name == "native" and mod is None:
            continue
        idx._native = mod
        answers, q_cpu, _ = timed(lambda: [idx.prefix(r) for r in reqs])
        paths[name] = {"lookups_per_s": round(len(reqs) * REQ / q_cpu), "us_per_request": round(q_cpu / len(reqs) * 1e6, 1),
                       "cached_blocks": sum(m.best() for m in answers)}  # fmt: skip
    idx._native = native
    if len({p["cached_blocks"] for p in paths.values()}) != 1:
        sys.exit(f"the native and numpy prefix queries disagree: {paths}")
    first = next(iter(paths.values()))
    _, s_cpu, _ = timed(lambda: [idx.lookup_slots(r) for r in reqs])
    bulk = keys[:1_000_000]
    lo, hi = key_arrays(bulk)
    _, b_cpu, _ = timed(lambda: idx._t.find(lo, hi))
    blocks = len(reqs) * REQ
    return {
        "structure": "numpy open addressing",
        "blocks": len(keys),
        "entries": stats["entries"],
        "bytes_per_entry": round(float(stats["bytes_per_entry"]), 1),
        "load": round(float(stats["load"]), 3),
        "build_cpu_s": round(build_cpu, 2),
        "build_wall_s": round(build_wall, 2),
        "prefix_query_path": next(iter(paths)),
        "prefix_query_lookups_per_s": first["lookups_per_s"],
        "prefix_query_us_per_request": first["us_per_request"],
        "prefix_query_by_path": paths,
        "lookup_128_per_s": round(blocks / s_cpu),
        "bulk_lookup_per_s": round(len(bulk) / b_cpu),
    }


def bench_dict(keys: list[bytes], seed: int) -> dict[str, Any]:
    """The obvious alternative: dict[bytes, slot] beside the same mask arrays."""
    gc.collect()
    tracemalloc.start()
    d: dict[bytes, int] = {}
    own = [bytes(k) for k in keys]  # the index keeps its own key objects (events are dropped)
    for i, k in enumerate(own):
        d[k] = i
    masks = np.zeros(len(keys), np.uint64)
    nbytes, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    reqs = requests(keys, 2000, seed)
    get = d.get

    def query(r: list[bytes]) -> int:
        n = 0
        for k in r:
            s = get(k)
            if s is None:
                break
            n += int(masks[s] != 0) + 1
        return n

    _, q_cpu, _ = timed(lambda: [query(r) for r in reqs])
    return {
        "structure": "dict[bytes, slot]",
        "blocks": len(keys),
        "bytes_per_entry": round(nbytes / len(keys), 1),
        "lookup_128_per_s": round(len(reqs) * REQ / q_cpu),
    }


def bench_rebuild(seed: int, n: int = 1_000_000, workers: int = 8) -> dict[str, Any]:
    keys = make_keys(n, seed + 99)
    evs = batches(keys, workers)
    _, cpu, wall = timed(lambda: BlockIndex().apply_many(evs))  # no capacity hint: growth included
    one = BlockIndex()
    _, cpu1, wall1 = timed(lambda: [one.apply(b) for b in evs[: len(evs) // 10]])
    return {
        "blocks": n,
        "rebuild_from_events_cpu_s": round(cpu, 2),
        "rebuild_from_events_wall_s": round(wall, 2),
        "batch_by_batch_cpu_s_extrapolated": round(cpu1 * 10, 2),
    }


def plot(out: dict[str, Any], path: Path) -> None:
    """Prefix-query blocks/s by path (C, numpy) per index size, against the 1 M/s goal."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = [r for r in out["rows"] if "prefix_query_by_path" in r]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    paths = sorted({p for r in rows for p in r["prefix_query_by_path"]})
    for j, name in enumerate(paths):
        xs = [i + 0.38 * (j - (len(paths) - 1) / 2) for i in range(len(rows))]
        ys = [r["prefix_query_by_path"].get(name, {}).get("lookups_per_s", 0) / 1e6 for r in rows]
        ax.bar(xs, ys, width=0.36, label=name)
    ax.axhline(1.0, color="r", ls="--", lw=1, label="goal: 1 M blocks/s")
    ax.set_xticks(range(len(rows)), [f"{r['blocks'] / 1e6:g} M blocks" for r in rows])
    ax.set_ylabel("prefix query, M blocks/s (CPU)")
    ax.set_title(f"128-block requests, 8 workers, load avg {out['loadavg']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,10000000", help="comma-separated block counts")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--dict-at", type=int, default=1_000_000, help="blocks for the dict side-by-side (0: skip)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "router_index.json")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        print(f"building {n:,} blocks ...", file=sys.stderr, flush=True)
        keys = make_keys(n, args.seed)
        rows.append(bench_array(keys, args.workers, args.seed))
        if n == args.dict_at:
            rows.append(bench_dict(keys, args.seed))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        del keys
        gc.collect()
    rebuild = bench_rebuild(args.seed, min(1_000_000, max(sizes)))
    big = max((r for r in rows if r["structure"].startswith("numpy")), key=lambda r: r["blocks"])
    out = {
        "bench": "router_index",
        "workers": args.workers,
        "loadavg": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "rows": rows,
        "rebuild": rebuild,
        "goals": {
            "bytes_per_entry_le_64": all(
                r["bytes_per_entry"] <= 64 for r in rows if r["structure"].startswith("numpy")
            ),
            "lookups_per_s_ge_1M_at_largest": big["prefix_query_lookups_per_s"] >= 1e6,
            "largest_blocks": big["blocks"],
            "rebuild_1M_le_5s": rebuild["rebuild_from_events_cpu_s"] <= 5,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    plot(out, args.out.with_suffix(".png"))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
