"""``ctxcache route``: build the router from the workers' own config and model, and serve it."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from ..errors import CtxCacheError

if TYPE_CHECKING:
    from .proxy import Router

err = Console(stderr=True, soft_wrap=True)


def build_router(
    workers: list[str],
    model: Path | None,
    config: Path | None,
    block_size: int | None,
    redis: str | None,
    *,
    history_ttl_s: float = 600.0,
    upstream_timeout_s: float = 600.0,
    piece_cache_tokens: int = 4 << 20,
) -> Router:
    from ..integrations.model_store import resolve_model
    from ..server.config import load_server_config
    from .feed import RouterEvents
    from .index import BlockIndex
    from .pool import Pool, Upstream
    from .proxy import Router
    from .requests import RequestKeys
    from .score import ScoreConfig, Scorer, Speculative

    cfg = load_server_config(config)
    if block_size is not None:
        cfg.cache_config["block_size"] = block_size
        cfg.validate()
    index, pool = BlockIndex(), Pool(workers)
    events = None
    if redis is not None:  # the workers' [events] table says how their streams are published
        events = RouterEvents.connect(redis, index, list(pool.workers), cfg.events)
        wmap = events.feed.map
        pool.on_ready = lambda w: wmap.report(w.url, w.events_worker)
    keys = RequestKeys.from_model_dir(resolve_model(model), cfg, piece_cache_tokens)
    # The history (approximate arm) stays on with --redis: it judges the workers no events cover.
    router = Router(pool, keys, Scorer(ScoreConfig(block_size=keys.block_size)), index,
                    history=Speculative(ttl_s=history_ttl_s, capacity=2_000_000), events=events,
                    upstream_timeout_s=upstream_timeout_s)  # fmt: skip

    def ejected(w: Upstream) -> None:
        router.metrics.ejections.labels(w.url).inc()
        router.spec.forget(w.url)  # its RAM may be gone: guesses about it must not draw requests back

    router.pool._on_eject = ejected
    return router


def route(
    workers: list[str],
    model: Path | None,
    config: Path | None,
    host: str,
    port: int,
    *,
    block_size: int | None = None,
    redis: str | None = None,
    drain_s: float = 30.0,
    log_level: str = "warning",
    piece_cache_tokens: int = 4 << 20,
) -> int:
    import uvicorn

    from .app import create_router_app

    bad = [w for w in workers if not w.startswith(("http://", "https://"))]
    if bad:
        err.print(f"[red]error:[/red] --worker must be an http(s):// URL, got {escape(bad[0])}", highlight=False)
        return 2
    try:
        with err.status("loading the tokenizer ..."):
            router = build_router(workers, model, config, block_size, redis, piece_cache_tokens=piece_cache_tokens)
    except (CtxCacheError, OSError, ValueError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        return 2
    app = create_router_app(router)
    how = f"KV events from {redis}" if redis else "its own history (no --redis: no KV events)"
    err.print(f"[bold]ctxcache routing at http://{host}:{port}[/bold] to {len(workers)} workers: {', '.join(workers)}; "
              f"by {escape(how)}", highlight=False)  # fmt: skip
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # SIGTERM: uvicorn stops accepting and lets in-flight requests (streams too) finish for drain_s.
    uvicorn.run(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=max(1, round(drain_s)))
    return 0


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)
