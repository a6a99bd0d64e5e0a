"""Grids of simulations and what people read from them: a table, JSON lines and miss-ratio curves.

The figure compared across policies is the *miss* side: in prefix semantics the token miss ratio
(1 - token hit ratio, what prefill pays for), in object semantics the block miss ratio
(libCacheSim's number, for cross-checks).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from .costmodel import CostModel
from .simulator import SimResult, Trace, simulate

# The fields a JSON line starts with, in this order; scripts downstream index on them.
JSON_FIELDS = (
    "policy",
    "size_blocks",
    "size_fraction",
    "semantics",
    "requests",
    "block_accesses",
    "miss_ratio",
    "token_hit_ratio",
    "est_prefill_s_saved",
    "accesses_per_s",
)
ORACLES = frozenset({"belady"})  # offline: a floor to compare with, never "the best policy"


def miss(r: SimResult) -> float:
    """The miss figure compared across policies for ``r``'s semantics."""
    return 1.0 - r.token_hit_ratio if r.semantics == "prefix" else r.miss_ratio


def miss_label(semantics: str) -> str:
    return "token miss ratio" if semantics == "prefix" else "block miss ratio"


def run_grid(
    trace: Trace,
    policies: Sequence[str],
    sizes: Sequence[float],
    *,
    semantics: str = "prefix",
    cost_model: CostModel | None = None,
    console: Console | None = None,
    label: str = "",
    partial: bool = False,
) -> list[SimResult]:
    """Simulate every (policy, size) pair over ``trace``, policy-major, behind one progress bar.

    A size <= 1 is a fraction of the trace's unique blocks, > 1 a block count (``Trace.capacity``).
    """
    caps = [trace.capacity(s) for s in sizes]  # fails on a bad size before any work is done
    n_req = len(trace.requests)
    results: list[SimResult] = []
    con = console or Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=con,
        transient=True,
        disable=not con.is_terminal,  # a bar in a log or a pipe is noise
    ) as bar:
        task = bar.add_task(label or "simulating", total=len(policies) * len(sizes) * n_req)
        for pol in policies:
            for size, cap in zip(sizes, caps):
                bar.update(task, description=f"{label} {semantics} {pol} @ {size:g}".lstrip())
                done = 0

                def advance(k: int) -> None:
                    nonlocal done
                    done += k
                    bar.advance(task, k)

                frac = size if size <= 1.0 else cap / max(1, trace.unique_blocks)
                res = simulate(
                    trace,
                    pol,
                    cap,
                    semantics=semantics,
                    cost_model=cost_model,
                    size_fraction=frac,
                    progress=advance,
                    partial=partial,
                )
                # Object semantics reports no progress; top each run up to its full share.
                bar.advance(task, n_req - done)
                results.append(res)
    return results


def to_record(r: SimResult, **extra: Any) -> dict[str, Any]:
    """``r`` as a dict whose first keys are ``JSON_FIELDS``, then the rest, then ``extra``."""
    d = r.to_dict()
    out = {k: d.pop(k) for k in JSON_FIELDS}
    out.update(d)
    out["miss"] = miss(r)
    out.update(extra)
    return out


def write_jsonl(results: Iterable[SimResult], out: IO[str], **extra: Any) -> None:
    for r in results:
        out.write(json.dumps(to_record(r, **extra)) + "\n")


def _columns(results: Sequence[SimResult]) -> list[tuple[float, int]]:
    return sorted({(r.size_fraction, r.size_blocks) for r in results})


def best_per_size(results: Sequence[SimResult]) -> dict[tuple[float, int], float]:
    """The lowest miss figure of any online policy, per (size fraction, blocks) column."""
    best: dict[tuple[float, int], float] = {}
    for r in results:
        if r.policy in ORACLES:
            continue
        col = (r.size_fraction, r.size_blocks)
        best[col] = min(best.get(col, float("inf")), miss(r))
    return best


def render_table(results: Sequence[SimResult], title: str = "") -> Table:
    """Rows are policies, columns sizes, cells the miss figure; the best online policy is marked."""
    cols = _columns(results)
    semantics = results[0].semantics if results else "prefix"
    table = Table(title=title or None, caption=f"{miss_label(semantics)}; * best online")
    table.add_column("policy")
    for frac, blocks in cols:
        table.add_column(f"{frac:g}\n{blocks:,} blk", justify="right")
    best = best_per_size(results)
    cell: dict[tuple[str, tuple[float, int]], float] = {}
    order: list[str] = []
    for r in results:
        if r.policy not in order:
            order.append(r.policy)
        cell[(r.policy, (r.size_fraction, r.size_blocks))] = miss(r)
    for pol in order:
        row = [f"[dim]{pol}[/dim]" if pol in ORACLES else pol]
        for col in cols:
            v = cell.get((pol, col))
            if v is None:
                row.append("")
            # Ties within float noise are all marked: equal policies are equally best.
            elif pol not in ORACLES and v <= best.get(col, v) + 1e-12:
                row.append(f"[bold green]{v:.4f} *[/bold green]")
            else:
                row.append(f"{v:.4f}  ")
        table.add_row(*row)
    return table


def plot_curves(results: Sequence[SimResult], path: str | Path, trace_name: str) -> Path:
    """Miss-ratio curves, one line per policy (oracles dashed), log-scale size axis, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, and the same output on every machine
    import matplotlib.pyplot as plt

    if not results:
        raise ValueError("no results to plot")
    semantics = results[0].semantics
    by_policy: dict[str, list[tuple[float, float]]] = {}
    for r in results:
        by_policy.setdefault(r.policy, []).append((r.size_fraction, miss(r)))
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    colors = plt.get_cmap("tab20").colors  # type: ignore[attr-defined]  # tab10 repeats past 10 policies
    try:
        for i, (pol, pts) in enumerate(by_policy.items()):
            pts.sort()
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            if pol in ORACLES:
                ax.plot(xs, ys, "--", color="black", marker="o", markersize=3, label=pol)
            else:
                ax.plot(xs, ys, "-", color=colors[i % len(colors)], marker="o", markersize=3, label=pol)
        ax.set_xscale("log")
        xs_all = sorted({r.size_fraction for r in results})
        ax.set_xticks(xs_all, [f"{x:g}" for x in xs_all])
        ax.minorticks_off()
        ax.set_xlabel("cache size (fraction of the trace's unique blocks)")
        ax.set_ylabel(miss_label(semantics))
        ax.set_title(f"{trace_name}: {miss_label(semantics)} vs cache size ({semantics} semantics)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small", ncol=2)
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out, format="png")
    finally:
        plt.close(fig)
    return out
