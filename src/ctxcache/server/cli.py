"""``ctxcache serve``: load a model, build the cache and run the HTTP server."""

from __future__ import annotations

import errno
import signal
import socket
import time
from pathlib import Path
from types import FrameType

import typer
from rich.console import Console
from rich.markup import escape

from ..cache import ContextCache
from ..errors import CtxCacheError
from .config import load_server_config
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


def serve(model: Path | None, host: str, port: int, config: Path | None) -> None:
    """Serve ``model`` (default: Gemma 3 270M, prepared once) with the context cache."""
    try:
        cfg = load_server_config(config)
    except CtxCacheError as exc:
        raise _fail(str(exc)) from None
    _check_port(host, port)
    try:
        from ..integrations.model_store import fingerprint, model_id_for, resolve_model

        path = resolve_model(model)  # before the heavy imports: a bad path fails fast
        import uvicorn

        from ..integrations.transformers import CachedLM
        from .app import create_app

        tune_allocator()  # before the model and the cache allocate (see server/memory.py)
        fp = fingerprint(path)
        cache_cfg = cfg.cache_dict(fp)
        if config is None:
            cache_cfg["tiers"] = embedded_tiers(fp)
        cache = ContextCache.from_config(cache_cfg)
        t0 = time.perf_counter()
        with err.status(f"loading {path} ..."):
            lm = CachedLM.from_pretrained(path, cache, max_context=cfg.max_context)
    except ImportError as exc:
        raise _fail(
            f"{exc}\n(the server needs: pip install torch==2.13.0 && pip install -e '.[model,server]')"
        ) from None
    except (CtxCacheError, OSError) as exc:
        raise _fail(str(exc)) from None
    model_id = cfg.model_id or model_id_for(path)
    app = create_app(lm, cfg, model_id=model_id)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}"
    keys = " -H 'Authorization: Bearer <your key>'" if cfg.api_keys else ""
    tiers = ", ".join(f"{t.name} {t.capacity / 2**30:.1f} GiB" for t in cache.tiers)
    err.print(
        f"model {model_id} loaded in {time.perf_counter() - t0:.1f} s; block size {cache.block_size}; tiers: {tiers}\n"
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
        uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
    finally:
        err.print(f"saving the cache ({cache.stats()['blocks']} blocks) ...", highlight=False)
        cache.close()  # RAM blocks go down to the disk tier, so a restart finds them


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)  # a requested stop is a clean exit, after the cache is saved
