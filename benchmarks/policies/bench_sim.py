"""Simulator speed: block accesses per second per policy on the whole conversation trace at 10%.

Object semantics is the headline (every block an object, as in libCacheSim); prefix semantics is
reported separately because it also walks the radix index. Baselines: a plain OrderedDict LRU loop
(the least a Python simulator can do per access) and, when importable, libcachesim driven from a
Python ``get()`` loop, i.e. the same per-access Python overhead around a C cache. libcachesim is
GPL: it is imported here only, never from src/.

Every mode runs once per round, rounds interleaved, so machine noise hits every mode alike; the
figure is the fastest round (as timeit advises: on a shared machine, slower rounds measure the
neighbours, not the code). Prints one JSON line, also written to results/bench_sim.json; plots
results/bench_sim.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lcs_oracle import LCS_CLASSES, lcs, libcachesim_run
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ctxcache.cli import default_trace
from ctxcache.policies import policy_names
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import read_mooncake

SIZE = 0.10
RESULTS = Path(__file__).resolve().parents[1] / "results"


def ordereddict_lru(ids: list[int], cap: int) -> tuple[int, float]:
    """The baseline: textbook LRU over one OrderedDict. Returns (misses, seconds)."""
    t0 = time.perf_counter()
    od: OrderedDict[int, None] = OrderedDict()
    move, pop = od.move_to_end, od.popitem
    misses = 0
    for b in ids:
        if b in od:
            move(b)
        else:
            misses += 1
            if len(od) >= cap:
                pop(last=False)
            od[b] = None
    return misses, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=None)
    args = ap.parse_args()
    path = args.trace or default_trace()
    if not path.is_file():
        sys.exit(f"error: trace file not found: {path}")
    trace = Trace(list(read_mooncake(path)))
    cap = trace.capacity(SIZE)
    n = int(trace.stream.size)
    ids = trace.stream.tolist()
    next_use = trace.next_use.tolist()  # int64 max where there is no next access
    policies = policy_names()
    lcs_policies = [p for p in LCS_CLASSES if lcs is not None]

    modes: dict[str, Callable[[], tuple[int, float]]] = {}
    for pol in policies:
        for sem in ("object", "prefix"):

            def run(pol: str = pol, sem: str = sem) -> tuple[int, float]:
                r = simulate(trace, pol, cap, semantics=sem, size_fraction=SIZE)
                return r.misses, r.block_accesses / r.accesses_per_s

            modes[f"{sem}:{pol}"] = run
    modes["ordereddict_lru"] = lambda: ordereddict_lru(ids, cap)
    for pol in lcs_policies:
        modes[f"libcachesim:{pol}"] = lambda cls=LCS_CLASSES[pol]: libcachesim_run(cls, ids, next_use, cap)

    secs: dict[str, list[float]] = {k: [] for k in modes}
    misses: dict[str, int] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("bench_sim", total=args.rounds * len(modes))
        for rnd in range(args.rounds):
            for k, fn in modes.items():
                bar.update(task, description=f"round {rnd + 1}/{args.rounds} {k}")
                m, s = fn()
                misses[k] = m
                secs[k].append(s)
                bar.advance(task)

    def aps(k: str) -> float:
        return round(n / min(secs[k]))

    # Same LRU in three implementations: a speed comparison only means something if they agree.
    assert misses["ordereddict_lru"] == misses["object:lru"], (misses["ordereddict_lru"], misses["object:lru"])
    if lcs is not None:
        assert misses["libcachesim:lru"] == misses["object:lru"], (misses["libcachesim:lru"], misses["object:lru"])
    obj = {p: aps(f"object:{p}") for p in policies}
    others_slow = sorted(p for p in policies if p != "lru" and obj[p] < 500_000)
    out = {
        "benchmark": "sim",
        "trace": path.name,
        "accesses": n,
        "unique_blocks": trace.unique_blocks,
        "size_fraction": SIZE,
        "size_blocks": cap,
        "object": obj,
        "prefix": {p: aps(f"prefix:{p}") for p in policies},
        "ordereddict_lru": aps("ordereddict_lru"),
        # Speed relative to the baseline in the same run: steadier across machines than raw rates.
        "object_vs_ordereddict": {p: round(obj[p] / aps("ordereddict_lru"), 3) for p in policies},
        "libcachesim": {p: aps(f"libcachesim:{p}") for p in lcs_policies} if lcs is not None else None,
        "targets": {"lru>=1.5M": obj.get("lru", 0) >= 1_500_000, "others>=0.5M": not others_slow},
        "below_0.5M": others_slow,
        "rounds": args.rounds,
        "statistic": "fastest round",
        "libcachesim_path": "python get() loop, hashpower=20" if lcs is not None else None,
        "python": sys.version.split()[0],
    }
    line = json.dumps(out)
    print(line)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_sim.json").write_text(line + "\n")
    plot(out, RESULTS / "bench_sim.png")


def plot(out: dict[str, Any], png: Path) -> None:
    """Grouped bars per policy (ours in both semantics, libcachesim), the OrderedDict loop as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pols = sorted(set(out["object"]) | set(out["libcachesim"] or {}))
    series = [("ours, object", out["object"]), ("ours, prefix", out["prefix"])]
    if out["libcachesim"]:
        series.append(("libcachesim get() loop", out["libcachesim"]))
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(pols) + 1.5), dpi=110)
    h = 0.8 / len(series)
    for j, (name, vals) in enumerate(series):
        ys = [i + (j - (len(series) - 1) / 2) * h for i in range(len(pols))]
        ax.barh(ys, [vals.get(p, 0) / 1e6 for p in pols], height=h, label=name)
    ax.axvline(out["ordereddict_lru"] / 1e6, color="black", linestyle="--", label="OrderedDict LRU loop")
    ax.set_yticks(range(len(pols)), pols)
    ax.invert_yaxis()
    ax.set_xlabel("million block accesses / s (higher is better)")
    ax.set_title(f"simulator speed: {out['trace']}, {out['size_fraction']:g} of unique blocks")
    ax.legend(fontsize="small", loc="best")
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


if __name__ == "__main__":
    main()
