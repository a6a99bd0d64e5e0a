"""``ctxcache analyze`` and ``ctxcache ab-report``."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..errors import CtxCacheError
from ..sim.traces import default_trace, read_mooncake

if TYPE_CHECKING:
    from .analyze import Analysis

console = Console()
err = Console(stderr=True, soft_wrap=True)


def _fail(msg: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {msg}", highlight=False)
    return typer.Exit(2)


def _parse_inject(spec: str) -> tuple[str, float, float]:
    """``scan@1800`` or ``flood@1800:120`` -> (kind, start s, duration s)."""
    try:
        kind, rest = spec.split("@", 1)
        start, _, dur = rest.partition(":")
        out = (kind, float(start), float(dur) if dur else 120.0)
    except ValueError:
        raise _fail(f"--inject {spec!r}: use KIND@START[:DURATION] in trace seconds, e.g. scan@1800:120") from None
    if kind not in ("scan", "flood") or out[1] < 0 or not out[2] > 0:
        raise _fail(f"--inject {spec!r}: KIND is scan or flood, START >= 0, DURATION > 0")
    return out


def _replay_windows(
    trace: Path | None, policy: str, size: float, window: float, tenants: int, inject: list[str], seed: int
) -> list[dict[str, Any]]:
    from .replay import assign_tenants, replay
    from .replay import inject as add

    path = trace or default_trace()
    if not path.is_file():
        raise _fail(f"trace file not found: {path}")
    reqs = list(read_mooncake(path))
    if tenants > 1:
        reqs = assign_tenants(reqs, tenants)
    rng = random.Random(seed)
    for spec in inject:
        kind, start, dur = _parse_inject(spec)
        reqs = add(reqs, start, dur, 10.0, 16, "flood" if kind == "flood" else None, rng)
    unique = len({b for r in reqs for b in r.blocks})
    cap = max(1, round(size * unique)) if size <= 1 else int(size)
    with Progress(TextColumn("replay"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err) as bar:
        task = bar.add_task("replay", total=len(reqs))
        res = replay(reqs, policy, cap, window_s=window, progress=lambda n: bar.advance(task, n))
        bar.update(task, completed=len(reqs))
    return res.windows


def _plot(rows: list[dict[str, Any]], flags: list[Any], features: tuple[str, ...], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(features), 1, figsize=(10, 1.8 * len(features)), sharex=True)
    t = [r["t"] / 60 for r in rows]
    for ax, f in zip(axes, features):
        ax.plot(t, [r[f] for r in rows], lw=1.2)
        ax.set_ylabel(f, fontsize=8)
        for fl in flags:
            ax.axvspan(fl.t / 60, fl.t / 60 + (rows[1]["t"] - rows[0]["t"]) / 60, color="red", alpha=0.25)
    axes[-1].set_xlabel("minutes (red: anomalous windows)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _print_analysis(rows: list[dict[str, Any]], result: Analysis, as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps({"windows": len(rows), "judged": result.judged, "warmup": result.warmup,
                                       "clusters": result.clusters, "flags": [f.to_dict() for f in result.flags]}))  # fmt: skip
        return
    console.print(f"{len(rows)} windows, {result.warmup} warm-up skipped, {result.clusters} cluster(s), "
                  f"{len(result.flags)} anomalous")  # fmt: skip
    if result.flags:
        table = Table("window start (s)", "driven by", "value", "median", "robust z", "cluster")
        for f in result.flags:
            table.add_row(f"{f.t:.0f}", f.feature, f"{f.value:.4g}", f"{f.median:.4g}", f"{f.z:+.1f}",
                          "noise" if f.cluster < 0 else str(f.cluster))  # fmt: skip
        console.print(table)


def analyze(
    log: Annotated[
        Path | None, typer.Argument(help="metrics log: JSON lines with hit_ratio etc. (the server's stats lines)")
    ] = None,
    trace: Annotated[
        Path | None, typer.Option(help="replay a Mooncake trace instead (default: the shared one)")
    ] = None,
    policy: Annotated[str, typer.Option(help="eviction policy for the replay")] = "lru",
    size: Annotated[float, typer.Option(help="replay cache size: fraction of unique blocks, or blocks if > 1")] = 0.11,
    window: Annotated[float, typer.Option(help="window length, seconds of trace time")] = 60.0,
    tenants: Annotated[int, typer.Option(help="spread the trace over this many tenants by conversation")] = 8,
    inject: Annotated[
        list[str] | None, typer.Option(help="disturbance KIND@START[:DUR], KIND scan|flood; repeatable")
    ] = None,
    eps: Annotated[float, typer.Option(help="DBSCAN eps, in robust z units")] = 2.5,
    min_samples: Annotated[int, typer.Option(help="DBSCAN min_samples")] = 4,
    z_min: Annotated[
        float, typer.Option(help="flag only windows with a feature this many robust deviations off")
    ] = 4.0,
    seed: Annotated[int, typer.Option(help="seed for injected disturbances")] = 0,
    save_windows: Annotated[Path | None, typer.Option(help="write the feature windows here (JSON lines)")] = None,
    plot: Annotated[Path | None, typer.Option(help="write a PNG of the features with flagged windows")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
) -> None:
    """Cluster metric windows with DBSCAN and flag the anomalous ones, with the feature that drove each."""
    from .analyze import analyze as run
    from .analyze import read_windows, write_windows

    if not window > 0 or not math.isfinite(window):
        raise _fail(f"--window must be > 0, got {window}")
    if tenants < 1:
        raise _fail(f"--tenants must be >= 1, got {tenants}")
    try:
        if log is not None:
            if trace is not None or inject:
                raise _fail("give a metrics log or --trace/--inject, not both")
            rows = read_windows(log)
        else:
            rows = _replay_windows(trace, policy, size, window, tenants, list(inject or []), seed)
        result = run(rows, eps=eps, min_samples=min_samples, z_min=z_min)
    except CtxCacheError as exc:
        raise _fail(str(exc)) from None
    if save_windows is not None:
        write_windows(rows, save_windows)
    if plot is not None:
        _plot(rows, result.flags, result.features, plot)
    _print_analysis(rows, result, as_json)


def ab_report(
    log: Annotated[Path, typer.Argument(help="the server's JSON log (CTXCACHE_LOG_JSON=1): its request lines")],
    alpha: Annotated[float, typer.Option(help="significance level")] = 0.05,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object instead of a table")] = False,
) -> None:
    """Per A/B group: hit ratio and TTFT p50/p95, and whether the difference is significant."""
    from .ab import compare, group_stats, read_requests

    if not 0 < alpha < 1:
        raise _fail(f"--alpha must be in (0, 1), got {alpha}")
    try:
        groups = group_stats(read_requests(log))
    except CtxCacheError as exc:
        raise _fail(str(exc)) from None
    cmp = compare(groups["a"], groups["b"], alpha) if {"a", "b"} <= set(groups) else None
    if as_json:
        out: dict[str, Any] = {g: {"requests": s.requests, "hit_ratio": s.hit_ratio, "ttft_p50_s": s.ttft_p50_s,
                                   "ttft_p95_s": s.ttft_p95_s} for g, s in groups.items()}  # fmt: skip
        if cmp is not None:
            out["test"] = {"hit_ratio_p": cmp.hit_ratio_p, "ttft_p": cmp.ttft_p, "alpha": alpha,
                           "hit_ratio_significant": cmp.hit_ratio_significant,
                           "ttft_significant": cmp.ttft_significant}  # fmt: skip
        console.print_json(json.dumps(out))
        return
    table = Table("group", "requests", "hit ratio", "TTFT p50", "TTFT p95")
    for g, s in groups.items():
        table.add_row(g, str(s.requests), f"{100 * s.hit_ratio:.1f}%", f"{1000 * s.ttft_p50_s:.1f} ms",
                      f"{1000 * s.ttft_p95_s:.1f} ms")  # fmt: skip
    console.print(table)
    if cmp is None:
        console.print("only one group in the log: nothing to compare")
        return
    for name, p, sig in (("hit ratio (Welch t-test, per request)", cmp.hit_ratio_p, cmp.hit_ratio_significant),
                         ("TTFT (Mann-Whitney U)", cmp.ttft_p, cmp.ttft_significant)):  # fmt: skip
        verdict = "significant" if sig else "not significant"
        console.print(f"{name}: p = {p:.3g}, {verdict} at alpha {alpha}")


def register(app: typer.Typer) -> None:
    app.command()(analyze)
    app.command("ab-report")(ab_report)
