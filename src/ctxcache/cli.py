"""The ``ctxcache`` command."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from . import __version__
from .cache import ContextCache
from .errors import CtxCacheError
from .policies import policy_names
from .sim.traces import MOONCAKE_BLOCK, count_lines, read_mooncake

app = typer.Typer(add_completion=False, help="ctxcache: a dynamic context (KV) cache for LLM inference.")
console = Console()
err = Console(stderr=True, soft_wrap=True)


def default_trace(name: str = "mooncake_conversation_trace.jsonl") -> Path:
    """Traces live in ../shared/traces next to the repo; CTXCACHE_TRACES overrides."""
    env = os.environ.get("CTXCACHE_TRACES")
    if env:
        return Path(env) / name
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        cand = base.parent / "shared" / "traces" / name
        if cand.exists():
            return cand
    return Path.cwd().parent / "shared" / "traces" / name


def _fail(msg: str) -> None:
    err.print(f"[red]error:[/red] {msg}", highlight=False)
    raise typer.Exit(2)


@app.command()
def version() -> None:
    """Print the version."""
    console.print(__version__)


@app.command()
def demo(
    trace: Annotated[
        Path | None, typer.Option(help="Mooncake JSONL trace (default: the shared conversation trace)")
    ] = None,
    size: Annotated[float, typer.Option(help="cache size as a fraction of the trace's unique blocks")] = 0.1,
    policy: Annotated[str, typer.Option(help=f"eviction policy: {', '.join(policy_names())}")] = "lru",
    block_kib: Annotated[int, typer.Option(help="synthetic payload size per 512-token block, KiB")] = 64,
    limit: Annotated[int | None, typer.Option(help="replay only the first N requests")] = None,
) -> None:
    """Replay a Mooncake trace through a ContextCache with synthetic payloads and report hits."""
    path = trace or default_trace()
    if not path.is_file():
        _fail(f"trace file not found: {path}")
    if not size > 0:
        _fail(f"--size must be > 0, got {size}")
    if policy not in policy_names():
        _fail(f"unknown policy {policy!r}; known: {', '.join(policy_names())}")
    if block_kib < 1:
        _fail(f"--block-kib must be >= 1, got {block_kib}")
    try:
        total = count_lines(path) if limit is None else min(limit, count_lines(path))
        unique = len({b for r in read_mooncake(path, limit) for b in r.blocks})
        block_bytes = block_kib * 1024
        capacity = max(1, round(size * unique)) * block_bytes
        cache = ContextCache.from_config(
            {"block_size": MOONCAKE_BLOCK,
             "tiers": [{"kind": "memory", "capacity": capacity, "policy": policy, "high": 1.0, "low": 1.0}]}
        )  # fmt: skip
        payload = bytes(block_bytes)  # shared object; charged once per block
        offs = np.arange(MOONCAKE_BLOCK, dtype=np.int64)
        t0 = time.perf_counter()
        with Progress(
            TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console
        ) as bar:
            task = bar.add_task("replay", total=total)
            for req in read_mooncake(path, limit):
                ids = np.asarray(req.blocks, dtype=np.int64)
                toks = ((ids[:, None] * MOONCAKE_BLOCK + offs) % (2**31 - 1)).ravel()[: req.input_length]
                with cache.lookup(toks) as m:
                    n_full = len(toks) // MOONCAKE_BLOCK
                    cache.store(toks, [payload] * (n_full - m.n_blocks), first_block=m.n_blocks)
                bar.advance(task)
        elapsed = time.perf_counter() - t0
    except CtxCacheError as exc:
        _fail(str(exc))
        return
    s = cache.stats()
    table = Table(title=f"ctxcache demo: {path.name}, policy {policy}, size {size:g} of {unique:,} unique blocks")
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("requests", f"{s['lookups']:,}"),
        ("input tokens", f"{s['lookup_tokens']:,}"),
        ("hit tokens", f"{s['hit_tokens']:,}"),
        ("token hit ratio", f"{s['token_hit_ratio']:.3f}"),
        ("block hits", f"{s['hits']:,}"),
        ("blocks stored", f"{s['stored_blocks']:,}"),
        ("evictions", f"{s['evictions']:,}"),
        ("requests/s", f"{s['lookups'] / elapsed:,.0f}"),
    ]
    for row in rows:
        table.add_row(*row)
    console.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
