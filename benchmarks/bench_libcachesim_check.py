"""Cross-check: our object-semantics miss ratios against libcachesim's, computed live.

Whole conversation trace, every block id one size-1 object, 1/5/10/20% of unique blocks, no
warmup; a cell passes when |ours - libcachesim| <= 0.005. libcachesim is GPL: it is imported here
only, never from src/. A policy we have not registered yet is reported as "missing"; without
libcachesim every reference is null. Prints one JSON line, also written to
results/libcachesim_check.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ctxcache.cli import default_trace
from ctxcache.policies import policy_names
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import read_mooncake

try:  # optional oracle: GPL, never a dependency of the package
    import libcachesim as lcs
except ImportError:
    lcs = None

TOLERANCE = 0.005
SIZES = (0.01, 0.05, 0.10, 0.20)
RESULTS = Path(__file__).resolve().parent / "results"
LCS_CLASSES = {
    "lru": "LRU",
    "fifo": "FIFO",
    "lfu": "LFU",
    "arc": "ARC",
    "lirs": "LIRS",
    "2q": "TwoQ",
    "s3fifo": "S3FIFO",
    "sieve": "Sieve",
    "w-tinylfu": "WTinyLFU",
    "belady": "Belady",
}


def libcachesim_misses(cls: str, ids: list[int], next_use: list[int], cap: int) -> int:
    assert lcs is not None
    cache = getattr(lcs, cls)(cache_size=cap, hashpower=20)  # hashpower changes speed, not results
    req = lcs.Request()
    req.obj_size = 1
    get = cache.get
    misses = 0
    if cls == "Belady":
        # Absolute position of the next access (int64 max if none): the default -2 silently
        # makes Belady evict arbitrarily, and a reuse distance gives wrong answers.
        for b, nxt in zip(ids, next_use):
            req.obj_id = b
            req.next_access_vtime = nxt
            misses += not get(req)
    else:
        for b in ids:
            req.obj_id = b
            misses += not get(req)
    return misses


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=None)
    args = ap.parse_args()
    path = args.trace or default_trace()
    if not path.is_file():
        sys.exit(f"error: trace file not found: {path}")
    trace = Trace(list(read_mooncake(path)))
    n = int(trace.stream.size)
    ids = trace.stream.tolist()
    next_use = trace.next_use.tolist()
    known = set(policy_names())
    caps = {f"{s:.2f}": trace.capacity(s) for s in SIZES}

    results: dict[str, Any] = {}
    failed: list[str] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("check", total=len(LCS_CLASSES) * len(SIZES))
        for pol, cls in LCS_CLASSES.items():
            if pol not in known:
                results[pol] = "missing"
                bar.advance(task, len(SIZES))
                continue
            cells: dict[str, Any] = {}
            for frac, cap in caps.items():
                bar.update(task, description=f"{pol} @ {frac}")
                ours = simulate(trace, pol, cap, semantics="object", size_fraction=float(frac)).miss_ratio
                ref = libcachesim_misses(cls, ids, next_use, cap) / n if lcs is not None else None
                diff = abs(ours - ref) if ref is not None else None
                ok = diff <= TOLERANCE if diff is not None else None
                if ok is False:
                    failed.append(f"{pol}@{frac}")
                cells[frac] = {
                    "capacity": cap,
                    "ours": round(ours, 6),
                    "libcachesim": round(ref, 6) if ref is not None else None,
                    "abs_diff": round(diff, 6) if diff is not None else None,
                    "pass": ok,
                }
                bar.advance(task)
            results[pol] = cells

    checked = [c for v in results.values() if isinstance(v, dict) for c in v.values() if c["pass"] is not None]
    out = {
        "benchmark": "libcachesim_check",
        "trace": path.name,
        "semantics": "object",
        "accesses": n,
        "unique_blocks": trace.unique_blocks,
        "tolerance": TOLERANCE,
        "libcachesim": getattr(lcs, "__version__", "unknown") if lcs is not None else None,
        "results": results,
        "missing": sorted(p for p, v in results.items() if v == "missing"),
        "failed": failed,
        "passed": sum(c["pass"] for c in checked),
        "checked": len(checked),
        "all_pass": bool(checked) and not failed and all(v != "missing" for v in results.values()),
    }
    line = json.dumps(out)
    print(line)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "libcachesim_check.json").write_text(line + "\n")


if __name__ == "__main__":
    main()
