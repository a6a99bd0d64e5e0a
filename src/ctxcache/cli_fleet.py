"""``ctxcache fleet-sim``: the fleet simulator (docs/routing.md, "Fleet simulation").

Its own command, not options of ``ctxcache simulate``: that one replays a trace through one cache
for every (policy, size); this one runs a fleet of caches behind a router for every arm.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from .sim.fleet import FleetConfig
from .sim.fleet_arms import ARMS
from .sim.fleet_workloads import SHAPES

err = Console(stderr=True, soft_wrap=True)
# (field, header): short headers, so the table fits an 80-column terminal
COLUMNS = (("arm", "arm"), ("qps", "QPS"), ("hit_ratio", "hit"), ("ttft_p50_s", "TTFT p50 s"),
           ("ttft_p90_s", "TTFT p90 s"), ("throughput_tok_s", "tok/s"), ("kv_fill_mean", "KV fill"),
           ("load_max_min", "max/min"))  # fmt: skip


def fleet_sim(
    workers: Annotated[int, typer.Option(help="simulated workers (1-64)")] = 8,
    router: Annotated[str, typer.Option(help=f"comma-separated arms, or 'all': {', '.join(ARMS)}")] = "all",
    shape: Annotated[str, typer.Option(help=f"workload: {', '.join(SHAPES)}")] = "shared-prefix",
    qps: Annotated[str, typer.Option(help="comma-separated QPS per worker (a ladder)")] = "1,2.5",
    requests: Annotated[int, typer.Option(help="requests per worker in each run")] = 250,
    kv_blocks: Annotated[int, typer.Option(help="each worker's KV capacity, 512-token blocks")] = 384,
    seed: Annotated[int, typer.Option(help="the workload's and the random arm's seed")] = 0,
    traces: Annotated[
        Path | None, typer.Option(help="folder of the Mooncake traces (default ../shared/traces)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per (QPS, arm) instead of a table")] = False,
) -> None:
    """Simulate a fleet of workers (real caches, modelled prefill and decode) behind each routing arm."""
    from dataclasses import replace

    from .sim.fleet_report import run_point

    arms = list(ARMS) if router == "all" else [a.strip() for a in router.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        _fail(f"unknown router arm {unknown[0] if unknown else router!r}; known: {', '.join(ARMS)} (or 'all')")
    if shape not in SHAPES:
        _fail(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    if not 1 <= workers <= 64:
        _fail(f"--workers must be in 1..64 (one router index tracks 64), got {workers}")
    if requests < 1 or kv_blocks < 1:
        _fail("--requests and --kv-blocks must be >= 1")
    try:
        ladder = [float(q) for q in qps.split(",") if q.strip()]
    except ValueError:
        _fail(f"--qps must be comma-separated numbers, got {qps!r}")
    if not ladder or any(q <= 0 for q in ladder):
        _fail(f"--qps must be positive, got {qps!r}")
    cfg = FleetConfig(seed=seed)
    cfg = replace(cfg, spec=replace(cfg.spec, kv_blocks=kv_blocks))
    rows = []
    try:
        for q in ladder:
            with err.status(f"{shape}: {workers} workers at {q:g} QPS each ..."):
                rows += run_point(shape, workers, q, requests * workers, arms, cfg, traces=traces)
    except (OSError, ValueError) as exc:  # a missing trace (TraceError is a ValueError), a bad file
        _fail(str(exc))
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps(r) + "\n")
        return
    table = Table(title=f"{shape}, {workers} workers, {requests * workers} requests per run (seed {seed})")
    for c, head in COLUMNS:
        table.add_column(head, justify="left" if c == "arm" else "right")
    for r in rows:
        table.add_row(*(_cell(c, r[c]) for c, _ in COLUMNS))
    Console().print(table)


def _cell(field: str, v: object) -> str:
    if v is None:
        return "-"
    if field == "throughput_tok_s" and isinstance(v, float):
        return f"{v:,.0f}"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _fail(msg: str) -> NoReturn:
    err.print(f"[red]error:[/red] {msg}")
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    app.command("fleet-sim")(fleet_sim)
