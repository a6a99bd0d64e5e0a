"""The index at scale: store/lookup latency per decade of blocks, RSS per block and the longest
stalls (with their cause) while one cache grows to 10 million blocks; today's code side by side.

Each tree runs in its own process (benchmarks/index/index_growth_worker.py) with PYTHONPATH pointing at
it: the baseline is ``git archive <commit> src/ctxcache`` unpacked under build/, the new one is
this checkout's src/. Wall-clock and per-op thread CPU time are both recorded: on a shared machine
wall-clock stalls include preemption by other processes, CPU time is the cache's own work.

    python benchmarks/index/bench_index_growth.py --max-blocks 100000          # quick, both trees
    python benchmarks/index/bench_index_growth.py --tree base ; ... --tree new ; ... --combine
    python benchmarks/index/bench_index_growth.py --combine --from-results benchmarks/results/index_growth.json \
        --out /tmp/x.json                                                # re-render a saved run

Beside the goals, the constant-work op (a noise floor) gets its count of ops over 10 ms and its
longest op, so a CPU stall of the cache can be told from one the machine gives any work; a table
of each tree's longest ops and their causes goes to stderr ("n/a" for runs saved before).

Goals (issue 15): p99.9 <= 2x p50 in every decade, no stall > 10 ms, <= 200 B/block, store and
lookup p50 no worse than the baseline's. Prints one JSON line; writes
benchmarks/results/index_growth.{json,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from index_growth_stalls import floor_summary, table

ROOT = Path(__file__).resolve().parents[2]
BASELINE_COMMIT = "ff0c450"
RESULTS = ROOT / "benchmarks" / "results"
PARTS = ROOT / "build" / "index_growth"
OPS = ("store", "lookup")


def baseline_tree(commit: str) -> Path:
    dest = ROOT / "build" / f"baseline-{commit}"
    if not (dest / "src" / "ctxcache" / "__init__.py").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "src/ctxcache"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "src"


def run_tree(tree: str, n: int, commit: str, max_seconds: float, parts: Path = PARTS) -> dict[str, Any]:
    src = baseline_tree(commit) if tree == "base" else ROOT / "src"
    env = dict(os.environ, PYTHONPATH=str(src))
    worker = ROOT / "benchmarks" / "index" / "index_growth_worker.py"
    cmd = [sys.executable, str(worker), "--max-blocks", str(n), "--label", tree, "--max-seconds", str(max_seconds)]
    out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
    part: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    part["tree"] = tree if tree == "new" else f"baseline {commit}"
    parts.mkdir(parents=True, exist_ok=True)
    (parts / f"{tree}.json").write_text(json.dumps(part))
    return part


def ratios(base: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """new / baseline p50, per decade both trees reached."""
    out = []
    for b, n in zip(base["decades"], new["decades"]):
        if (b["from"], b["to"]) != (n["from"], n["to"]):
            break
        row: dict[str, Any] = {"from": b["from"], "to": b["to"]}
        for k in b:
            if isinstance(b[k], dict) and b[k] and n[k]:
                row[f"{k}_p50_ratio"] = round(n[k]["p50"] / b[k]["p50"], 3)
        out.append(row)
    return out


def tail_ratios(tree: dict[str, Any]) -> list[dict[str, Any]]:
    """p99.9 / p50 per decade and op, the constant-work op (noise floor) beside store and lookup."""
    return [
        {"from": r["from"], "to": r["to"]}
        | {k: round(v["p99.9"] / v["p50"], 2) for k, v in r.items() if isinstance(v, dict) and v}
        for r in tree["decades"]
    ]


def goals(new: dict[str, Any], rat: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's goals, judged on the new tree (wall clock and CPU time separately)."""
    tails: dict[str, float] = {}
    for row in tail_ratios(new):
        for k, v in row.items():
            if k not in ("from", "to"):
                tails[k] = max(tails.get(k, 0.0), v)
    worst_wall = max((s["wall_ms"] for s in new["stalls_top_wall"]), default=0.0)
    worst_cpu = max((s["cpu_ms"] for s in new["stalls_top_cpu"]), default=0.0)
    bpb = float(list(new["rss_bytes_per_block"].values())[-1])
    p50 = {
        k: max(r.get(f"{k}_p50_ratio", 0.0) for r in rat)
        for k in ("store_cpu", "lookup_cpu", "store_wall", "lookup_wall")
    }
    ops = ("store_wall", "store_cpu", "lookup_wall", "lookup_cpu")
    return {
        "worst_p999_over_p50": {k: tails[k] for k in ops},
        "noise_floor_worst_p999_over_p50": {k: v for k, v in tails.items() if k.startswith("noise")},
        "p999_within_2x_p50_cpu": all(tails[k] <= 2 for k in ("store_cpu", "lookup_cpu")),
        "p999_within_2x_p50_wall": all(tails[k] <= 2 for k in ("store_wall", "lookup_wall")),
        "longest_stall_ms": {"wall": worst_wall, "cpu": worst_cpu},
        # The same machine's effect on an op whose work never varies: CPU stalls it has too are not the cache's.
        **floor_summary(new),
        "no_stall_over_10ms_cpu": worst_cpu <= 10,
        "no_stall_over_10ms_wall": worst_wall <= 10,
        "bytes_per_block": bpb,
        "at_most_200_bytes_per_block": bpb <= 200,
        "worst_decade_p50_ratio": p50,
        "p50_no_worse_cpu": p50["store_cpu"] <= 1.0 and p50["lookup_cpu"] <= 1.0,
    }


def plot(base: dict[str, Any] | None, new: dict[str, Any] | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 2, figsize=(12, 16))
    trees = [(t, style) for t, style in ((base, "--"), (new, "-")) if t is not None]
    for ax, (op, clock) in zip(axes[:2].flat, [(o, c) for c in ("wall", "cpu") for o in OPS]):
        for t, style in trees:
            rows = [r for r in t["decades"] if r[f"{op}_{clock}"]]
            x = [r["to"] for r in rows]
            for q, color in (("p50", "C0"), ("p99", "C2"), ("p99.9", "C1"), ("max", "C3")):
                ax.plot(
                    x, [r[f"{op}_{clock}"][q] for r in rows], style, color=color, marker="o", label=f"{t['tree']} {q}"
                )
        ax.set(
            xscale="log", yscale="log", xlabel="blocks (end of decade)", ylabel="µs", title=f"{op} latency ({clock})"
        )
        ax.axhline(10_000, color="grey", lw=0.8)
        ax.legend(fontsize=6)
    ax = axes[2, 0]
    for t, style in trees:
        pts = sorted((int(k), v) for k, v in t["rss_bytes_per_block"].items())
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=t["tree"])
    ax.axhline(200, color="grey", lw=0.8, label="goal 200 B")
    ax.set(xscale="log", yscale="log", xlabel="blocks", ylabel="RSS bytes / block", title="memory per block")
    ax.legend(fontsize=7)
    ax = axes[2, 1]
    for i, (t, _) in enumerate(trees):
        walls = [s["wall_ms"] for s in t["stalls_top_wall"]]
        cpus = [s["cpu_ms"] for s in t["stalls_top_cpu"]]
        ax.bar([j + 0.2 * i for j in range(len(walls))], walls, 0.2, label=f"{t['tree']} wall")
        ax.bar([j + 0.2 * i + 0.4 for j in range(len(cpus))], cpus, 0.2, label=f"{t['tree']} cpu")
        noise = [s["cpu_ms"] for s in t.get("noise_top_cpu", [])]  # absent from runs saved before it was kept
        if noise:
            ax.plot(
                range(len(noise)),
                noise,
                "x",
                ms=8,
                zorder=3,
                color=("grey", "k")[i],
                label=f"{t['tree']} constant-work op cpu",
            )
    ax.axhline(10, color="grey", lw=0.8)
    ax.set(yscale="log", xlabel="rank", ylabel="ms", title="10 longest ops (wall; cpu; x: constant-work op)")
    ax.legend(fontsize=7)
    plot_tails(axes[3, 0], trees)
    if new is not None:
        plot_depth(axes[3, 1], new)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def plot_tails(ax: Any, trees: list[tuple[dict[str, Any], str]]) -> None:
    for t, style in trees:
        rows = tail_ratios(t)
        for op, color in (("store", "C0"), ("lookup", "C2"), ("noise", "C7")):
            pts = [(r["to"], r[f"{op}_cpu"]) for r in rows if f"{op}_cpu" in r]
            if pts:
                label = f"{t['tree']} {'constant-work op' if op == 'noise' else op}"
                ax.plot([x for x, _ in pts], [y for _, y in pts], style, color=color, marker="o", label=label)
    ax.axhline(2, color="grey", lw=0.8, label="goal 2x")
    ax.set(xscale="log", xlabel="blocks (end of decade)", ylabel="p99.9 / p50", title="tail ratio (cpu)")
    ax.legend(fontsize=6)


def plot_depth(ax: Any, new: dict[str, Any]) -> None:
    """The last decade's store and lookup CPU time by prompt depth (the work varies with it)."""
    row = new.get("by_depth", [{}])[-1]
    for op, color in (("store", "C0"), ("lookup", "C2")):
        pts = sorted((int(d), v) for d, v in row.get(f"{op}_cpu", {}).items())
        for q, style in (("p50", "-"), ("p99.9", "--")):
            ax.plot([d for d, _ in pts], [v[q] for _, v in pts], style, color=color, marker="o", label=f"{op} {q}")
    ax.set(
        xlabel="prompt depth (blocks)", ylabel="µs", title=f"new tree, by depth, {row.get('from', 0):,}+ blocks (cpu)"
    )
    ax.legend(fontsize=7)


def load_parts(parts_dir: Path, from_results: Path | None) -> dict[str, dict[str, Any]]:
    """Each tree's saved run: the worker's parts, or the trees of an earlier results file."""
    if from_results is not None:
        trees: dict[str, dict[str, Any]] = json.loads(from_results.read_text())["trees"]
        return trees
    return {
        t: json.loads((parts_dir / f"{t}.json").read_text())
        for t in ("base", "new")
        if (parts_dir / f"{t}.json").exists()
    }


def combine(commit: str, out: Path, parts_dir: Path = PARTS, from_results: Path | None = None) -> dict[str, Any]:
    parts = load_parts(parts_dir, from_results)
    base, new = parts.get("base"), parts.get("new")
    result: dict[str, Any] = {"bench": "index_growth", "baseline_commit": commit, "trees": parts}
    if base and new:
        result["ratios"] = ratios(base, new)
        result["goals"] = goals(new, result["ratios"])
    result["tail_ratios"] = {t: tail_ratios(p) for t, p in parts.items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    plot(base, new, out.with_suffix(".png"))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-blocks", type=int, default=10_000_000)
    ap.add_argument("--tree", choices=("base", "new", "both"), default="both")
    ap.add_argument("--combine", action="store_true", help="only combine saved parts into the results")
    ap.add_argument("--baseline", default=BASELINE_COMMIT, help="commit of today's code")
    ap.add_argument("--max-seconds", type=float, default=float("inf"), help="per tree: stop growing after this")
    ap.add_argument("--out", type=Path, default=RESULTS / "index_growth.json")
    ap.add_argument("--parts", type=Path, default=PARTS, help="where each tree's run is saved and combined from")
    ap.add_argument("--from-results", type=Path, help="with --combine: re-render the trees of this results JSON")
    args = ap.parse_args()
    if not args.combine:
        for tree in ("base", "new") if args.tree == "both" else (args.tree,):
            run_tree(tree, args.max_blocks, args.baseline, args.max_seconds, args.parts)
    result = combine(args.baseline, args.out, args.parts, args.from_results)
    print(table(result["trees"]), file=sys.stderr)  # stdout keeps its one JSON line
    summary: dict[str, Any] = {k: result[k] for k in ("bench", "baseline_commit", "goals") if k in result}
    summary["blocks"] = {t: p["blocks"] for t, p in result["trees"].items()}
    summary["ratios"] = result.get("ratios")
    summary["stalls"] = {t: floor_summary(p) for t, p in result["trees"].items()}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
