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

from lcs_oracle import LCS_CLASSES, lcs, libcachesim_run
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ctxcache.cli import default_trace
from ctxcache.policies import policy_names
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import read_mooncake

TOLERANCE = 0.005
SIZES = (0.01, 0.05, 0.10, 0.20)
RESULTS = Path(__file__).resolve().parents[1] / "results"


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
                ref = libcachesim_run(cls, ids, next_use, cap)[0] / n if lcs is not None else None
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
