"""``ctxcache cache stats|clear|erase``: look at and erase what a cache config's tiers hold.

``cache clear`` without ``--config`` deletes what ``ctxcache serve`` saved under $CTXCACHE_HOME/kv.

Each command opens the tiers of a config (a cache TOML, or a server TOML with a [cache] table),
so it sees the blocks an earlier run left on disk (and their owners, from the block headers),
acts, and closes. Run it while the server is stopped (a disk tier is locked by its owner), or
use the server's admin API (``DELETE /v1/admin/tenants/{id}/cache``) while it runs.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer

from .cache import ContextCache
from .errors import CtxCacheError

cache_app = typer.Typer(add_completion=False, help="Inspect or erase what the cache tiers hold.")
_CLEAR_CONFIG = "cache TOML, or a server TOML with a [cache] table (default: what `serve` saved in $CTXCACHE_HOME/kv)"
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
def clear(
    config: Annotated[Path | None, typer.Option("--config", "-c", help=_CLEAR_CONFIG)] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
    models: Annotated[bool, typer.Option("--models", help="without --config: also delete the converted model")] = False,
) -> None:
    """Erase every block of every tenant from every tier of a config; without --config, delete the KV
    blocks `ctxcache serve` saved under $CTXCACHE_HOME/kv (a running server's are kept)."""
    if config is None:
        _clear_home(yes, models)
        return
    if not yes:
        typer.confirm(f"erase every cached block of {config}?", abort=True)
    with _open(config) as cache:
        typer.echo(json.dumps(cache.clear()))


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _in_use(directory: Path) -> bool:
    """A disk tier holds an exclusive flock on its LOCK file while a server runs."""
    import fcntl

    lock = directory / "LOCK"
    if not lock.exists():
        return False
    with lock.open("rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
    return False


def _clear_home(yes: bool, models: bool) -> None:
    import shutil

    from .integrations.model_store import ctxcache_home

    home = ctxcache_home()
    targets = sorted(p for p in (home / "kv").glob("*") if p.is_dir())
    targets += [home / "models"] if models and (home / "models").is_dir() else []
    if not targets:
        typer.echo(f"nothing to clear under {home}")
        return
    total = sum(_size(p) for p in targets)
    if not yes and not typer.confirm(f"delete {len(targets)} directories ({total / 2**30:.2f} GiB) under {home}?"):
        raise typer.Exit(1)
    freed = 0
    for p in targets:
        if _in_use(p):
            typer.echo(f"skipped {p}: in use by a running server (stop it first)", err=True)
            continue
        size = _size(p)
        shutil.rmtree(p)
        freed += size
    typer.echo(f"freed {freed / 2**30:.2f} GiB under {home}")


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
