"""``ctxcache cache stats|clear|erase``: look at and erase what a cache config's tiers hold.

Each command opens the tiers of a config (a cache TOML, or a server TOML with a [cache] table),
so it sees the blocks an earlier run left on disk (and their owners, from the block headers),
acts, and closes. Run it while the server is stopped (a disk tier is locked by its owner), or
use the server's admin API (``DELETE /v1/admin/tenants/{id}/cache``) while it runs.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import typer

from .cache import ContextCache
from .errors import CtxCacheError

cache_app = typer.Typer(add_completion=False, help="Inspect or erase what the cache tiers hold.")
CONFIG = typer.Option(..., "--config", "-c", help="cache TOML, or a server TOML with a [cache] table")


def _open(config: Path) -> ContextCache:
    try:
        data: dict[str, Any] = tomllib.loads(config.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise typer.BadParameter(f"cannot read {config}: {exc}") from None
    try:
        return ContextCache.from_config(data.get("cache", data) if "tiers" not in data else data)
    except CtxCacheError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


@cache_app.command()
def stats(config: Path = CONFIG) -> None:
    """Blocks and bytes per tier, and bytes per tenant in each tier (JSON)."""
    with _open(config) as cache:
        s = cache.stats()
        out = {name: {k: t.get(k) for k in ("kind", "blocks", "bytes", "tenants")} for name, t in s["tiers"].items()}
        typer.echo(json.dumps({"blocks": s["blocks"], "bytes": s["bytes"], "tiers": out}, indent=1))


@cache_app.command()
def clear(config: Path = CONFIG, yes: bool = typer.Option(False, "--yes", help="do not ask")) -> None:
    """Erase every block of every tenant from every tier."""
    if not yes:
        typer.confirm(f"erase every cached block of {config}?", abort=True)
    with _open(config) as cache:
        typer.echo(json.dumps(cache.clear()))


@cache_app.command()
def erase(tenant: str, config: Path = CONFIG) -> None:
    """Erase one tenant's blocks from every tier, verified (audit-logged)."""
    with _open(config) as cache:
        ty = cache.tenancy
        if ty is not None and tenant not in ty.tenants:
            typer.echo(f"error: unknown tenant {tenant!r}; known: {', '.join(sorted(ty.tenants))}", err=True)
            raise typer.Exit(2)
        out = cache.erase_tenant(tenant)
        typer.echo(json.dumps(out))
        if not out["verified"]:
            raise typer.Exit(1)
