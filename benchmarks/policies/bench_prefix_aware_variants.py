"""prefix-aware's parameter variants against its defaults and LRU, in one run (docs/prefix-aware.md).

The variants are the ones "What did not work" reports that the policy still takes as parameters:
pure hit density (``margin`` 1; and 0.7, which "How the defaults were chosen" calls equal to the
default 0.4 on conversation), request-context classes, a decayed block count (``freq_half_life``)
and a recompute weight (``cost_weight``). The modes it also names (one
exponential per class, LRU shift, textbook LHD, LeCaR mixing, other horizons) are no longer in
the code and are not run here. Token miss ratio, prefix semantics, sizes 1/5/10/20 % of each shipped
trace's unique blocks; every cell also as a ratio to LRU and to the default in the same run.

Writes results/prefix_aware_variants.json and .png; prints one JSON line. ``--limit`` requests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ctxcache.cli import default_trace
from ctxcache.sim.report import miss
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import read_mooncake

TRACES = ("mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl")
SIZES = (0.01, 0.05, 0.1, 0.2)
RESULTS = Path(__file__).resolve().parents[1] / "results"
# label -> policy spec; "lru" and "default" are the two baselines every variant is read against.
VARIANTS: dict[str, dict[str, Any]] = {
    "lru": {"name": "lru"},
    "default": {"name": "prefix-aware"},
    "margin 0.7": {"name": "prefix-aware", "margin": 0.7},
    "margin 1 (pure HD)": {"name": "prefix-aware", "margin": 1.0},
    "request-context classes": {"name": "prefix-aware", "new_edges": [1, 2, 4, 8], "shared_count": 8},
    "freq_half_life 300": {"name": "prefix-aware", "freq_half_life": 300.0},
    "freq_half_life 600": {"name": "prefix-aware", "freq_half_life": 600.0},
    "freq_half_life 1000": {"name": "prefix-aware", "freq_half_life": 1000.0},
    "cost_weight 0.05": {"name": "prefix-aware", "cost_weight": 0.05},
}


def run_trace(trace: Trace) -> dict[str, list[float]]:
    """label -> token miss ratio at each size."""
    out: dict[str, list[float]] = {}
    for label, spec in VARIANTS.items():
        out[label] = []
        for size in SIZES:
            out[label].append(miss(simulate(trace, dict(spec), trace.capacity(size), size_fraction=size)))
            print(f"{label} @ {size:g}: {out[label][-1]:.4f}", file=sys.stderr, flush=True)
    return out


def ratios(cells: dict[str, list[float]], base: str) -> dict[str, list[float]]:
    return {k: [round(x / b, 4) for x, b in zip(v, cells[base], strict=True)] for k, v in cells.items()}


def plot(per_trace: dict[str, dict[str, list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(per_trace), figsize=(6.5 * len(per_trace), 4.5), dpi=110)
    for ax, (name, cells) in zip(axes, per_trace.items(), strict=True):
        # Ratios to the default, not raw miss ratios: the variants sit within 1-3 % of each other.
        for label, ys in ratios(cells, "default").items():
            style = "k--" if label == "lru" else ("o-" if label == "default" else ".-")
            ax.plot(SIZES, ys, style, label=label, linewidth=2 if label == "default" else 1)
        ax.set_xscale("log")
        ax.set_xticks(SIZES, [f"{s:g}" for s in SIZES])
        ax.minorticks_off()
        ax.set_xlabel("cache size (fraction of unique blocks)")
        ax.set_ylabel("token miss ratio / default's (lower is better)")
        ax.set_title(f"{name}: prefix-aware variants (prefix semantics)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N requests of each trace")
    args = ap.parse_args()
    RESULTS.mkdir(exist_ok=True)
    per_trace: dict[str, dict[str, list[float]]] = {}
    full: dict[str, Any] = {"sizes": list(SIZES), "limit": args.limit, "variants": VARIANTS, "traces": {}}
    for fname in TRACES:
        path = default_trace(fname)
        if not path.is_file():
            sys.exit(f"error: trace file not found: {path}")
        name = fname.removeprefix("mooncake_").removesuffix("_trace.jsonl")
        cells = run_trace(Trace(list(read_mooncake(path, args.limit))))
        per_trace[name] = cells
        full["traces"][name] = {
            "token_miss": cells,
            "vs_lru": ratios(cells, "lru"),
            "vs_default": ratios(cells, "default"),
        }
    suffix = "" if args.limit is None else f"_limit{args.limit}"
    (RESULTS / f"prefix_aware_variants{suffix}.json").write_text(json.dumps(full, indent=1) + "\n")
    plot(per_trace, RESULTS / f"prefix_aware_variants{suffix}.png")
    summary = {n: {k: [round(x, 4) for x in v] for k, v in c.items()} for n, c in per_trace.items()}
    print(json.dumps({"benchmark": "prefix_aware_variants", "limit": args.limit, "token_miss": summary}))


if __name__ == "__main__":
    main()
