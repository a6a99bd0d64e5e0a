"""The ``ctxcache`` command."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from . import __version__, accel
from .cache import ContextCache
from .cli_cache import cache_app
from .cli_fleet import register as register_fleet
from .cli_replicate import replicate
from .errors import CtxCacheError
from .observability.cli import register as register_observability
from .policies import policy_names
from .sim.costmodel import PRESETS, get_cost_model
from .sim.report import plot_curves, render_table, run_grid, to_record
from .sim.simulator import SEMANTICS, Trace
from .sim.traces import MOONCAKE_BLOCK, count_lines, default_trace, read_mooncake

app = typer.Typer(add_completion=False, help="ctxcache: a dynamic context (KV) cache for LLM inference.")
app.add_typer(cache_app, name="cache")
app.command()(replicate)
console = Console()
err = Console(stderr=True, soft_wrap=True)


def _fail(msg: str) -> NoReturn:
    err.print(f"[red]error:[/red] {msg}", highlight=False)
    raise typer.Exit(2)


@app.callback()
def _options(
    no_native: Annotated[
        bool,
        typer.Option(
            "--no-native",
            help="the pure-Python key walk and LRU/FIFO order, not the compiled ones (as CTXCACHE_NO_NATIVE=1)",
        ),
    ] = False,
) -> None:
    if no_native:
        accel.use_native(False)


@app.command()
def version() -> None:
    """Print the version, and which key walk runs (compiled or pure Python)."""
    console.print(__version__)
    d = accel.describe()
    console.print(f"key walk: {d['key_walk']} ({d['reason']})", highlight=False)
    console.print(f"LRU/FIFO order: {d['lru_fifo_order']}", highlight=False)
    console.print(f"simulator replay loops: {d['sim_replay']}", highlight=False)


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
        elapsed = _replay(cache, path, limit, total, bytes(block_bytes))
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


def _replay(cache: ContextCache, path: Path, limit: int | None, total: int, payload: bytes) -> float:
    """Each request: lookup, then store the blocks past the hit (one shared payload object,
    charged once per block). Returns the seconds it took."""
    offs = np.arange(MOONCAKE_BLOCK, dtype=np.int64)
    t0 = time.perf_counter()
    with Progress(
        TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console
    ) as bar:
        task = bar.add_task("replay", total=total)
        for req in read_mooncake(path, limit):
            ids = np.asarray(req.blocks, dtype=np.int64)
            toks = ((ids[:, None] * MOONCAKE_BLOCK + offs) % (2**31 - 1)).ravel()[: req.input_length]
            prompt = cache.prompt(toks)  # validated and hashed once for the lookup and the store
            with cache.lookup(prompt) as m:
                cache.store(prompt, [payload] * (prompt.n_blocks - m.n_blocks), first_block=m.n_blocks)
            bar.advance(task)
    return time.perf_counter() - t0


def _parse_sizes(text: str) -> list[float]:
    sizes = []
    for part in text.split(","):
        try:
            v = float(part.strip())
        except ValueError:
            _fail(f"--size: cannot parse {part.strip()!r} as a number (want e.g. 0.01,0.05,0.1 or 2000)")
        if not (math.isfinite(v) and v > 0):
            _fail(f"--size must be > 0 (a fraction <= 1 or a block count > 1), got {part.strip()}")
        sizes.append(v)
    return sizes


def _parse_policies(text: str) -> list[str]:
    known = policy_names()
    if text.strip() == "all":
        return known
    names = list(dict.fromkeys(p.strip() for p in text.split(",")))  # dedupe, keep order
    for name in names:
        if name not in known:
            _fail(f"unknown policy {name!r}; known: {', '.join(known)} (or 'all')")
    return names


@app.command()
def simulate(
    trace: Annotated[
        Path | None, typer.Option(help="Mooncake JSONL trace (default: the shared conversation trace)")
    ] = None,
    policy: Annotated[str, typer.Option(help="comma-separated policies, or 'all' (Belady included)")] = "all",
    size: Annotated[
        str, typer.Option(help="comma-separated sizes: <= 1 a fraction of unique blocks, > 1 a block count")
    ] = "0.01,0.05,0.1,0.2",
    semantics: Annotated[str, typer.Option(help="prefix (longest cached leading run) or object (every block)")] = (
        "prefix"
    ),
    cost_model: Annotated[
        str, typer.Option(help=f"prefill cost model for est. seconds saved: {', '.join(sorted(PRESETS))}")
    ] = "gemma3-270m-cpu",
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per (policy, size) instead of a table")] = (
        False
    ),
    plot: Annotated[Path | None, typer.Option(help="also write miss-ratio curves to this PNG")] = None,
    limit: Annotated[int | None, typer.Option(help="replay only the first N requests")] = None,
) -> None:
    """Replay a trace through the simulator for every (policy, size) and compare miss ratios."""
    path = trace or default_trace()
    sizes = _parse_sizes(size)
    policies = _parse_policies(policy)
    if semantics not in SEMANTICS:
        _fail(f"unknown semantics {semantics!r}; known: {', '.join(SEMANTICS)}")
    if limit is not None and limit < 1:
        _fail(f"--limit must be >= 1, got {limit}")
    if plot is not None and not plot.parent.is_dir():
        _fail(f"--plot: directory does not exist: {plot.parent}")
    if not path.is_file():
        _fail(f"trace file not found: {path}")
    try:
        cost = get_cost_model(cost_model)
        tr = Trace(list(read_mooncake(path, limit)))
        if not tr.requests:
            _fail(f"trace has no requests: {path}")
        # Progress goes to stderr so that stdout stays clean for --json and pipes.
        results = run_grid(tr, policies, sizes, semantics=semantics, cost_model=cost, console=err)
    except CtxCacheError as exc:
        _fail(str(exc))
    if as_json:
        for r in results:
            sys.stdout.write(json.dumps(to_record(r, trace=path.name, cost_model=cost.name)) + "\n")
    else:
        console.print(
            f"[bold]{path.name}[/bold]: {semantics} semantics, {len(tr.requests):,} requests, "
            f"{tr.unique_blocks:,} unique blocks"
        )
        console.print(render_table(results))
    if plot is not None:
        try:
            plot_curves(results, plot, path.name)
        except ImportError:
            _fail("--plot needs matplotlib: pip install 'ctxcache[sim]'")
        except OSError as exc:
            _fail(f"--plot: cannot write {plot}: {exc.strerror or exc}")
        if not as_json:
            console.print(f"plot written to {plot}")


_PRINT_CONFIG = "print the effective configuration and where each value came from, then exit"


def _env(name: str) -> str:
    return f"CTXCACHE_{name}"


_ModelOpt = Annotated[
    Path | None,
    typer.Option(
        help="local Hugging Face model directory (default: Gemma 3 270M, prepared once)", envvar=_env("MODEL")
    ),
]
_HostOpt = Annotated[str, typer.Option(help="address to listen on", envvar=_env("HOST"))]
_PortOpt = Annotated[int, typer.Option(help="port to listen on", envvar=_env("PORT"))]
_ConfigOpt = Annotated[
    Path | None, typer.Option(help="server config TOML (see docs/serving.md)", envvar=_env("CONFIG"))
]
_ApiKeyOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="accept this API key (repeatable; tenant 'default'); none: no authentication", envvar=_env("API_KEY")
    ),
]
_ServedModelNameOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="the model's name in the API (repeatable: the first is served, the rest are aliases)",
        envvar=_env("SERVED_MODEL_NAME"),
    ),
]
_MaxModelLenOpt = Annotated[
    int | None,
    typer.Option(help="context limit: prompt + max_tokens (capped by the model's)", envvar=_env("MAX_MODEL_LEN")),
]
_BlockSizeOpt = Annotated[int | None, typer.Option(help="tokens per cached block", envvar=_env("BLOCK_SIZE"))]
_EngineOpt = Annotated[
    str, typer.Option(help="transformers (embedded CachedLM) or vllm (docs/vllm.md)", envvar=_env("ENGINE"))
]
_CacheConfigOpt = Annotated[
    Path | None, typer.Option(help="--engine vllm: ctxcache cache TOML (tiers)", envvar=_env("CACHE_CONFIG"))
]
_VllmPythonOpt = Annotated[
    str | None, typer.Option(help="--engine vllm: Python with vLLM installed", envvar=_env("VLLM_PYTHON"))
]
_LogLevelOpt = Annotated[
    str | None,
    typer.Option(help="ctxcache's log level: DEBUG, INFO, WARNING, ERROR (default INFO)", envvar=_env("LOG_LEVEL")),
]
_LogJsonOpt = Annotated[
    bool | None,
    typer.Option("--log-json/--log-text", help="log one JSON object per line (default: $CTXCACHE_LOG_JSON)"),
]
_UvicornLogLevelOpt = Annotated[
    str, typer.Option(help="uvicorn's log level (access log at info)", envvar=_env("UVICORN_LOG_LEVEL"))
]


@app.command(context_settings={"allow_extra_args": True})
def serve(
    ctx: typer.Context,
    model: _ModelOpt = None,
    host: _HostOpt = "127.0.0.1",
    port: _PortOpt = 8000,
    config: _ConfigOpt = None,
    api_key: _ApiKeyOpt = None,
    served_model_name: _ServedModelNameOpt = None,
    max_model_len: _MaxModelLenOpt = None,
    block_size: _BlockSizeOpt = None,
    engine: _EngineOpt = "transformers",
    cache_config: _CacheConfigOpt = None,
    vllm_python: _VllmPythonOpt = None,
    log_level: _LogLevelOpt = None,
    log_json: _LogJsonOpt = None,
    uvicorn_log_level: _UvicornLogLevelOpt = "info",
    print_config: Annotated[bool, typer.Option("--print-config", help=_PRINT_CONFIG)] = False,
) -> None:
    """Serve a model over OpenAI- and Anthropic-compatible HTTP APIs, with the context cache.

    Every flag can also be set from the environment (CTXCACHE_<FLAG>, e.g. CTXCACHE_PORT=9000).
    Precedence: flag > environment > config file > default. With --engine vllm, everything after
    `--` goes to vLLM's server (`ctxcache serve --engine vllm -- --max-num-batched-tokens 512`).
    """
    if engine == "vllm":
        _serve_vllm(model, host, port, cache_config, vllm_python, list(ctx.args))
        return
    if engine != "transformers":
        _fail(f"--engine must be transformers or vllm, got {engine!r}")
    if ctx.args:
        _fail(f"arguments after `--` go to vLLM and need --engine vllm, got {' '.join(ctx.args)!r}")
    from .server.cli import Overrides
    from .server.cli import serve as run_server  # lazy: FastAPI and torch load only for this command

    sources = {name: _source(ctx, name) for name in ctx.params}
    over = Overrides(api_keys=api_key or [], names=served_model_name or [], max_context=max_model_len,
                     block_size=block_size, log_level=log_level, log_json=log_json,
                     uvicorn_log_level=uvicorn_log_level,
                     sources=sources)  # fmt: skip
    run_server(model, host, port, config, over, print_config=print_config)


def _source(ctx: typer.Context, name: str) -> str:
    src = ctx.get_parameter_source(name)
    return {"COMMANDLINE": "flag", "ENVIRONMENT": "environment"}.get(getattr(src, "name", ""), "default")


register_observability(app)  # analyze, ab-report
register_fleet(app)  # fleet-sim


_REDIS_HELP = (
    "Redis URL of the workers' KV-event streams: route by what each worker really holds (its events worker id "
    "maps to its --worker URL by /readyz, else by port); without it, by the router's own history"
)

_PIECES_HELP = (
    "token ids of chat turns kept, so that a conversation's next request tokenizes only its new turns "
    "(0: off; ~+0.1 ms of CPU on a one-off 4k-token prompt, docs/routing.md)"
)


@app.command()
def route(
    worker: Annotated[list[str], typer.Option(help="a worker's base URL (repeat for each worker)")],
    redis: Annotated[str | None, typer.Option(help=_REDIS_HELP)] = None,
    model: _ModelOpt = None,
    config: _ConfigOpt = None,
    host: _HostOpt = "127.0.0.1",
    port: _PortOpt = 8080,
    block_size: _BlockSizeOpt = None,
    drain_s: Annotated[float, typer.Option(help="on SIGTERM, seconds in-flight requests get to finish")] = 30.0,
    piece_cache_tokens: Annotated[int, typer.Option(help=_PIECES_HELP, min=0)] = 4 << 20,
) -> None:
    """Route OpenAI and Anthropic requests to the worker that has their prefix cached (docs/routing.md).

    Give it the workers' model and config file: it tokenizes and keys requests exactly as they do.
    """
    from .router.cli import route as run_router

    raise typer.Exit(run_router(worker, model, config, host, port, block_size=block_size, redis=redis,
                                drain_s=drain_s, piece_cache_tokens=piece_cache_tokens))  # fmt: skip


def _serve_vllm(
    model: Path | None, host: str, port: int, cache_config: Path | None, python: str | None, extra: list[str]
) -> None:
    from .integrations.model_store import resolve_model
    from .integrations.vllm.serve import check_passthrough, exec_vllm, find_vllm_python, vllm_command

    try:
        check_passthrough(extra)
        argv = vllm_command(find_vllm_python(python), resolve_model(model), host, port, cache_config, extra)
    except CtxCacheError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    err.print("starting vLLM: " + " ".join(argv[:3]) + " ...")
    exec_vllm(argv)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
