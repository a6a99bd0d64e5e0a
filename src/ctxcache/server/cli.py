"""``ctxcache serve``: load a model, build the cache and run the HTTP server."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from .. import accel
from ..cache import ContextCache
from ..errors import CtxCacheError
from .config import DEFAULT_TENANT, ServerConfig, load_server_config
from .memory import tune_allocator

err = Console(stderr=True, soft_wrap=True)


def _fail(msg: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(msg)}", highlight=False)
    return typer.Exit(2)


def _check_port(host: str, port: int) -> None:
    """Fail before the slow model load, with a useful message, if the address is taken."""
    if not 0 < port < 65536:
        raise _fail(f"--port must be in 1..65535, got {port}")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise _fail(f"{host}:{port} is already in use: pass another --port") from None
        raise _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def embedded_tiers(model_fingerprint: str) -> list[dict[str, object]]:
    """The default without a config file: 2 GiB of RAM over 10 GiB of local disk.

    The disk directory is per model, so a restarted server finds its blocks again and two models
    never read each other's. One process owns a directory: a second default server on the same
    machine gets a clear error and can be given a config file instead.
    """
    from ..integrations.model_store import ctxcache_home

    tag = model_fingerprint.rsplit("@", 1)[-1]
    return [
        {"kind": "memory", "capacity": "2GiB", "policy": "lru"},
        {"kind": "disk", "capacity": "10GiB", "policy": "lru", "path": str(ctxcache_home() / "kv" / tag)},
    ]


@dataclass
class Overrides:
    """What flags and CTXCACHE_* variables set on top of the config file (None/empty: not set)."""

    api_keys: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    max_context: int | None = None
    block_size: int | None = None
    log_level: str | None = None  # None: $CTXCACHE_LOG_LEVEL or INFO (observability.logging)
    log_json: bool | None = None  # None: $CTXCACHE_LOG_JSON
    uvicorn_log_level: str = "info"
    sources: dict[str, str] = field(default_factory=dict)


def _configure(config: Path | None, over: Overrides) -> tuple[ServerConfig, dict[str, str]]:
    """The effective ServerConfig (flag > environment > config file > default) and each key's source."""
    cfg = load_server_config(config)
    where = "config file" if config is not None else "default"
    src = {f"server.{k}": where for k in ("model_id", "max_context", "api_keys")}
    src["cache.block_size"] = where if "block_size" in cfg.file_cache_keys else "default"
    src["cache.tiers"] = where if "tiers" in cfg.file_cache_keys else "default (RAM + disk)"
    flag = over.sources
    if over.names:
        cfg.model_id, cfg.model_aliases = over.names[0], [*over.names[1:], *cfg.model_aliases]
        src["server.model_id"] = flag.get("served_model_name", "flag")
    if over.max_context is not None:
        cfg.max_context, src["server.max_context"] = over.max_context, flag.get("max_model_len", "flag")
    if over.api_keys:
        cfg.api_keys = {k: DEFAULT_TENANT for k in over.api_keys}
        src["server.api_keys"] = flag.get("api_key", "flag")
    if over.block_size is not None:
        cfg.cache_config["block_size"] = over.block_size
        src["cache.block_size"] = flag.get("block_size", "flag")
    cfg.validate()
    return cfg, src


def _print_config(cfg: ServerConfig, cache_cfg: dict[str, Any], src: dict[str, str], over: Overrides) -> None:
    shown = {k: v for k, v in vars(cfg).items() if k not in ("cache_config", "file_cache_keys")}
    shown["api_keys"] = [f"<{len(k)}-character key> -> {t}" for k, t in cfg.api_keys.items()]  # no secrets
    out = {
        "server": shown,
        "cache": cache_cfg,
        "logging": {
            "log_level": over.log_level or os.environ.get("CTXCACHE_LOG_LEVEL", "INFO"),
            "log_json": over.log_json,
            "uvicorn_log_level": over.uvicorn_log_level,
        },
        "sources": {**src, **{f"flag.{k}": v for k, v in over.sources.items()}},
        "native": accel.describe(),  # the compiled key walk, or why the pure-Python one runs
    }
    print(json.dumps(out, indent=1, default=str))


def serve(
    model: Path | None,
    host: str,
    port: int,
    config: Path | None,
    over: Overrides | None = None,
    *,
    print_config: bool = False,
) -> None:
    """Serve ``model`` (default: Gemma 3 270M, prepared once) with the context cache."""
    from ..observability.logging import configure

    over = over or Overrides()
    try:
        configure(over.log_level, over.log_json)  # before the config: a bad level or table fails fast
        cfg, src = _configure(config, over)
    except (CtxCacheError, ValueError) as exc:
        raise _fail(str(exc)) from None
    if not print_config:
        _check_port(host, port)
    try:
        from ..integrations.model_store import fingerprint, model_id_for, resolve_model

        path = resolve_model(model)  # before the heavy imports: a bad path fails fast
        fp = fingerprint(path)
        cache_cfg = cfg.cache_dict(fp)
        if "tiers" not in cfg.file_cache_keys:  # no tiers configured (no file, or a [server]-only one)
            cache_cfg["tiers"] = embedded_tiers(fp)
        if print_config:
            cfg.model_id = cfg.model_id or model_id_for(path)
            _print_config(cfg, cache_cfg, src, over)
            return
        lm, cache = _load(path, cache_cfg, cfg)
    except ImportError as exc:
        raise _fail(
            f"{exc}\n(the server needs: pip install torch==2.13.0 && pip install -e '.[model,server]')"
        ) from None
    except (CtxCacheError, OSError) as exc:
        raise _fail(str(exc)) from None
    _run(lm, cache, cfg, cfg.model_id or model_id_for(path), host, port, over.uvicorn_log_level)


def _load(path: Path, cache_cfg: dict[str, Any], cfg: ServerConfig) -> tuple[Any, ContextCache]:
    from ..integrations.transformers import CachedLM

    tune_allocator()  # before the model and the cache allocate (see server/memory.py)
    cache = ContextCache.from_config(cache_cfg)
    with err.status(f"loading {path} ..."):
        lm = CachedLM.from_pretrained(path, cache, max_context=cfg.max_context)
    return lm, cache


def _run(lm: Any, cache: ContextCache, cfg: ServerConfig, model_id: str, host: str, port: int, uv_log: str) -> None:
    import uvicorn

    from ..events.runtime import default_worker
    from .app import create_app
    from .memtrace import start_from_env as start_memtrace

    cfg.events.setdefault("worker", default_worker(port))  # the id other workers and routers see
    if cfg.replication:
        cfg.replication.setdefault("worker", cfg.events["worker"])
    app = create_app(lm, cfg, model_id=model_id)
    start_memtrace(cache)  # only with CTXCACHE_MEMTRACE set (server/memtrace.py)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    keys = " -H 'Authorization: Bearer <your key>'" if cfg.api_keys else ""
    tiers = ", ".join(f"{t.name} {t.capacity / 2**30:.1f} GiB" for t in cache.tiers)
    err.print(
        f"model {model_id} loaded; block size {cache.block_size}; tiers: {tiers}\n"
        f"[bold]ctxcache serving {model_id} at {url}[/bold]  (API docs: {url}/docs, metrics: {url}/metrics)\n"
        f"try:\n  curl -s {url}/v1/chat/completions -H 'Content-Type: application/json'{keys} \\\n"
        f'    -d \'{{"model": "{model_id}", "max_tokens": 32, '
        f'"messages": [{{"role": "user", "content": "Hello!"}}]}}\'',
        highlight=False,
    )
    # uvicorn catches SIGTERM, shuts down, then re-raises it with the handler that was there before:
    # Python's default one kills the process before the `finally` below could save the cache.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        uvicorn.run(app, host=host, port=port, log_level=uv_log.lower(), timeout_graceful_shutdown=5)
    finally:
        err.print(f"saving the cache ({cache.stats()['blocks']} blocks) ...", highlight=False)
        cache.close()  # RAM blocks go down to the disk tier, so a restart finds them


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)  # a requested stop is a clean exit, after the cache is saved
