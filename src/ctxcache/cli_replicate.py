"""``ctxcache replicate``: run a region's replicator (docs/regions.md)."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import tomllib
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.console import Console

from .errors import CtxCacheError

err = Console(stderr=True, soft_wrap=True)
_CONFIG = (
    "the workers' config (a server TOML, or a cache TOML): erasures, invalidations, TTLs and pins "
    "are then applied to its shared (Redis) tiers by the replicator too, not only by running workers"
)


def _shared_cache(config: Path) -> Any:
    """A ContextCache over the config's Redis tiers only: a worker's RAM and disk are its own."""
    from .cache import ContextCache

    try:
        data: dict[str, Any] = tomllib.loads(config.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CtxCacheError(f"cannot read {config}: {exc}") from None
    cc = dict(data.get("cache", data) if "tiers" not in data else data)
    shared = [dict(t) for t in cc.get("tiers", []) if isinstance(t, dict) and t.get("kind") in ("redis", "cluster")]
    if not shared:
        raise CtxCacheError(f"{config} has no Redis tier: nothing shared for the replicator to apply updates to")
    # A small RAM tier on top: the cache's first tier takes stores, and this one stores nothing.
    cc["tiers"] = [{"kind": "memory", "capacity": "1MiB"}, *shared]
    cc.setdefault("block_size", 32)
    return ContextCache.from_config(cc)


def replicate(
    region: Annotated[str, typer.Option(help="this region's name (1-64 of A-Z a-z 0-9 . _ -)")],
    redis: Annotated[str, typer.Option(help="this region's Redis URL (its log, state and inbox live there)")],
    peer: Annotated[list[str], typer.Option(help="a peer region as NAME=redis://host:port/db (repeat for each)")],
    config: Annotated[Path | None, typer.Option(help=_CONFIG)] = None,
    prefix: Annotated[str, typer.Option(help="key prefix of the replication keys")] = "ctxcache:repl:",
    metrics_port: Annotated[int | None, typer.Option(help="serve /metrics (ctxcache_replication_*) here")] = None,
    metrics_host: Annotated[str, typer.Option(help="address of the metrics listener")] = "127.0.0.1",
    status_every: Annotated[float, typer.Option(help="seconds between status lines on stderr (0: none)")] = 10.0,
    interval: Annotated[float, typer.Option(help="seconds a quiet replicator waits between polls")] = 0.05,
) -> None:
    """Ship this region's metadata log to its peers and apply theirs in causal order.

    One per region (a second waits, and takes over when the first stops). Workers of the region
    follow its log through their [replication] table; a cut link queues updates in the log.
    """
    from .replication.effects import CacheEffects
    from .replication.metrics import ReplicatorCollector
    from .replication.service import Service, parse_peers

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cache = None
    try:
        peers = parse_peers(peer)
        cache = _shared_cache(config) if config is not None else None
        effects = CacheEffects(cache) if cache is not None else None
        svc = Service(region, redis, peers, effects, prefix=prefix, interval=interval)
    except (CtxCacheError, ValueError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        if cache is not None:
            cache.close()
        raise typer.Exit(2) from None
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if metrics_port is not None:
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry()
        registry.register(ReplicatorCollector(lambda: svc.status(digest=False)))
        start_http_server(metrics_port, addr=metrics_host, registry=registry)
    worker = threading.Thread(target=svc.run, args=(stop,), name="ctxcache-replicator", daemon=True)
    worker.start()
    err.print(f"replicating region {region} ({redis}) with {', '.join(peers)}", highlight=False)
    try:
        last = time.monotonic()
        while not stop.wait(0.2):
            if status_every and time.monotonic() - last >= status_every:
                last = time.monotonic()
                _status_line(svc)
    finally:
        worker.join(timeout=10)
        _status_line(svc)
        if cache is not None:
            cache.close()


def _status_line(svc: Any) -> None:
    try:
        s = svc.status()
    except CtxCacheError as exc:
        s = {"error": str(exc)}
    if s is not None:
        keep = ("region", "holding", "head", "keys", "digest", "queued", "pending", "conflicts", "lag_p50_s",
                "lag_p99_s")  # fmt: skip
        err.print(json.dumps({k: s[k] for k in keep if k in s} | {"up": {p: v["up"] for p, v in s["peers"].items()}}
                             if "peers" in s else s), highlight=False, markup=False)  # fmt: skip
