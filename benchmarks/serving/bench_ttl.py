"""TTL sweeper cost from 10^3 to 10^6 blocks: O(expired log n), not O(n).

For each n, n blocks get deadlines spread over an hour; then time advances so that a fixed 1000
(100 at n = 10^3) of them expire, and the sweeper reclaims them. Side by side, the same reclaim done by a scan of
every deadline (what a sweeper without a time index pays). Figures: microseconds per expired
block, and the ratio of the scan to the heap. Writes benchmarks/results/bench_ttl.json and .png.

Run: .venv/bin/python benchmarks/serving/bench_ttl.py [--quick]
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import time
from pathlib import Path

from ctxcache.engine.expiry import Expiry

QUICK = "--quick" in sys.argv
SIZES = [10**3, 10**4, 10**5] + ([] if QUICK else [10**6])
EXPIRE = 1000  # blocks that expire per sweep (a tenth of n at n = 10^3)
OUT = Path(__file__).resolve().parents[1] / "results"


def one(n: int, rng: random.Random) -> dict[str, float]:
    """Median of 3 rounds, with the garbage collector off while timing (setup allocates a lot)."""
    rounds = [_round(n, rng) for _ in range(3)]
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def _round(n: int, rng: random.Random) -> dict[str, float]:
    e = Expiry()
    expire = min(EXPIRE, n // 10)
    deadlines = sorted(rng.uniform(0, 3600) for _ in range(n))
    for i, d in enumerate(deadlines):
        e.set(i, d)
    for i in rng.sample(range(n), expire):  # hits refresh some blocks: stale heap entries
        e.set(i, e.deadline[i] + 3600)
    now = sorted(e.deadline.values())[expire - 1]
    gc.collect()
    gc.disable()
    t0 = time.perf_counter()
    due = e.due(now)
    for k in due:
        e.forget(k)
    heap_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scanned = [k for k, d in e.deadline.items() if d <= now]  # the baseline: look at every block
    scan_s = time.perf_counter() - t0
    gc.enable()
    assert not scanned  # the heap found every expired block
    return {"n": n, "expired": len(due), "heap_us_per_expired": heap_s / len(due) * 1e6,
            "scan_us_per_expired": scan_s / len(due) * 1e6, "scan_vs_heap": scan_s / heap_s}  # fmt: skip


def main() -> None:
    rng = random.Random(0)
    rows = []
    try:
        from rich.progress import track
    except ImportError:  # pragma: no cover
        track = None  # type: ignore[assignment]
    sizes = track(SIZES, description="ttl sweep") if track else SIZES
    for n in sizes:
        r = one(n, rng)
        rows.append({k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()})
    growth = rows[-1]["heap_us_per_expired"] / rows[0]["heap_us_per_expired"]
    out = {"bench": "ttl_sweep", "rows": rows, "heap_cost_growth": round(growth, 2),
           "n_growth": SIZES[-1] // SIZES[0]}  # fmt: skip
    print(json.dumps(out), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_ttl.json").write_text(json.dumps(out, indent=1) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    ns = [r["n"] for r in rows]
    ax.loglog(ns, [r["heap_us_per_expired"] for r in rows], "o-", label="heap sweeper (ctxcache)")
    ax.loglog(ns, [r["scan_us_per_expired"] for r in rows], "s--", label="full scan (baseline)")
    ax.set_xlabel("cached blocks with a TTL")
    ax.set_ylabel("µs per expired block")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT / "bench_ttl.png", dpi=120)


if __name__ == "__main__":
    main()
