"""The fleet simulation of issue 27: every routing arm on a QPS ladder and on 4, 8 and 32 workers,
one run per shape, and the issue's goals read from it (docs/routing.md, "Fleet simulation").

    python benchmarks/fleet/bench_fleet_sim.py                     # the documented run
    python benchmarks/fleet/bench_fleet_sim.py --shapes shared-prefix --per-worker 100 --sweep 4,8

Each simulated worker is a real ContextCache (sim/fleet_worker.py) behind a cost model; the
cache-aware arms are the router's own code (sim/fleet_arms.py). Deterministic: the same seed
gives the same figures. Prints one JSON line (each goal met or not, with its figure); writes
benchmarks/results/fleet_sim.json and fleet_sim.png.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ctxcache.sim.fleet import FleetConfig
from ctxcache.sim.fleet_arms import ARMS
from ctxcache.sim.fleet_report import goals, plot, run_point
from ctxcache.sim.fleet_workloads import SHAPES

ROOT = Path(__file__).resolve().parents[2]
# QPS per worker, from light load to past the point where the precise arm's KV is >= 70 % full.
# Chat's sessions last ~75 s (6 rounds): a run of 1,200 requests spans several only at low QPS,
# and its mostly cached short turns never fill the KV there. Mooncake's long prompts saturate
# prefill long before they fill the KV: no point of their ladders reaches 70 %.
LADDERS = {
    "shared-prefix": [0.25, 1, 2, 2.5, 3],
    "chat": [0.1, 0.25, 0.5, 1, 1.5],
    "mooncake-conversation": [0.05, 0.1, 0.2, 0.3, 0.45],
    "mooncake-synthetic": [0.05, 0.1, 0.2, 0.3, 0.45],
}


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="shared-prefix,chat,mooncake-conversation")
    ap.add_argument("--workers", type=int, default=8, help="fleet size of the QPS ladder")
    ap.add_argument("--qps", default=None, help="the ladder, in QPS per worker (default: per shape, LADDERS)")
    ap.add_argument("--traces", type=Path, default=None, help="folder of the Mooncake traces (or $CTXCACHE_TRACES)")
    ap.add_argument("--sweep", default="4,8,32", help="fleet sizes, at the high-load QPS per worker")
    ap.add_argument("--per-worker", type=int, default=150, help="requests per worker in each ladder run")
    ap.add_argument("--sweep-per-worker", type=int, default=75, help="requests per worker in each sweep run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fleet_sim.json")
    args = ap.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        ap.error(f"unknown shape {bad[0]!r}; known: {', '.join(SHAPES)}")
    ladders = {s: _floats(args.qps) if args.qps else LADDERS[s] for s in shapes}
    sweep = [int(x) for x in args.sweep.split(",") if x]
    cfg = FleetConfig(seed=args.seed)
    sweep_n = sum(sweep) * args.sweep_per_worker  # the same requests per worker at every size
    total = sum(len(ARMS) * (args.per_worker * len(ladders[s]) * args.workers + sweep_n) for s in shapes)
    con = Console(stderr=True)
    t0 = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TimeRemainingColumn())  # fmt: skip
    spec = cfg.spec

    def save(partial: bool) -> float:
        """The result file, rewritten after each shape: a long run that stops keeps what it did."""
        wall = time.perf_counter() - t0
        record = {
            "partial": partial,
            "benchmark": "fleet_sim",
            "config": {
                "shapes": shapes,
                "ladder_workers": args.workers,
                "qps_per_worker": ladders,
                "sweep_workers": sweep,
                "requests_per_worker": args.per_worker,
                "sweep_requests_per_worker": args.sweep_per_worker,
                "seed": args.seed,
                "warmup": cfg.warmup,
                "warmup_slowdown": cfg.warmup_slowdown,
                "event_lag_s": cfg.event_lag_s,
                "kv_blocks": spec.kv_blocks,
                "block_tokens": 512,
                "decode_s": spec.decode_s,
                "shared_read_s": spec.shared_read_s,
                "policy": spec.policy,
                "cost": {"a": spec.cost.a, "b": spec.cost.b, "c0": spec.cost.c0, "source": spec.cost.source},
                "score": vars(cfg.score),
            },  # fmt: skip
            "wall_s": round(wall, 1),
            "cpus": os.cpu_count(),
            "shapes": results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        return wall

    with Progress(*cols, console=con, disable=not con.is_terminal) as bar:
        task = bar.add_task("fleet", total=total)

        def step(n: int) -> None:
            bar.advance(task, n)

        for shape in shapes:
            ladder: list[dict[str, Any]] = []
            for q in ladders[shape]:
                bar.update(task, description=f"{shape} {args.workers} workers @ {q:g}/worker")
                ladder += run_point(
                    shape, args.workers, q, args.per_worker * args.workers, ARMS, cfg, step, args.traces
                )
            q_hi = goals(ladder)["high_load_qps_per_worker"]
            rows: list[dict[str, Any]] = []
            for n in sweep:
                bar.update(task, description=f"{shape} {n} workers @ {q_hi:g}/worker")
                rows += run_point(shape, n, q_hi, args.sweep_per_worker * n, ARMS, cfg, step, args.traces)
            results[shape] = {"ladder": ladder, "sweep": rows, "goals": goals(ladder, rows)}
            con.print(f"{shape}: {_summary(results[shape]['goals'])}")
            save(partial=True)
    wall = save(partial=False)
    png = args.out.with_suffix(".png")
    plot(results, png)
    line = {"benchmark": "fleet_sim", "wall_s": round(wall, 1), "result": str(args.out.relative_to(ROOT))
            if args.out.is_relative_to(ROOT) else str(args.out), "plot": png.name,
            "goals": {s: {k: v for k, v in d["goals"].items()} for s, d in results.items()}}  # fmt: skip
    sys.stdout.write(json.dumps(line) + "\n")
    return 0


def _summary(g: dict[str, Any]) -> str:
    word = {True: "met", False: "NOT met", None: "not judged (fill < 70 %)"}
    return ", ".join(f"{k} {word[v['met']]} ({v['value']})" for k, v in g.items() if isinstance(v, dict))


if __name__ == "__main__":
    raise SystemExit(main())
