"""Admin routes for the metadata regions replicate: invalidate a prefix, a tenant's TTL, operator
pins, and the replication's status (docs/regions.md).

Each route acts on this worker's caches at once, then, with a ``[replication]`` table, submits
the update to the region's replicator, which stamps it and ships it to every peer region. A
submission the region's Redis does not take is a 503 after the local effect: the call is
idempotent, so retrying it is the remedy, and until then the other regions do not have it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from .deps import APIError
from .replicate import submit
from .routes_admin import _caches, _known, _merged, require_admin

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "invalid block key, TTL or tenant id"},
    401: {"description": "missing admin key"},
    403: {"description": "not an admin key, or the admin API is disabled (no admin key configured)"},
    404: {"description": "unknown tenant, or replication not configured"},
    503: {"description": "applied here, but the region's replication log is unreachable: retry (idempotent)"},
}
router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[Depends(require_admin)], responses=_ERRORS)


class Invalidate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(description="the block key (hex) of the prefix to withdraw: it and every block under it")


class TenantTTL(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ttl: float | None = Field(gt=0, lt=1e12, description="seconds; null: no TTL")


def _block_key(text: str, param: str = "key") -> bytes:
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise APIError(400, f"{param} must be a block key in hex, got {text[:80]!r}", param=param) from None
    if not 1 <= len(key) <= 64:
        raise APIError(400, f"{param} must be 1-64 bytes, got {len(key)}", param=param)
    return key


def _with(out: dict[str, Any], rep: dict[str, Any] | None) -> dict[str, Any]:
    if rep is not None:
        out["replication"] = rep
    return out


@router.post("/cache/invalidate")
async def invalidate(body: Invalidate, request: Request) -> dict[str, Any]:
    """Withdraw a prefix (a document, a system prompt): the block and every block under it, from
    every tier, verified; then in every region."""
    key = _block_key(body.key)
    out = _merged([await asyncio.to_thread(c.invalidate, key) for c in _caches(request)])
    return _with(out, await submit(request, "invalidate", key))


@router.put("/tenants/{tenant}/ttl")
async def set_ttl(tenant: str, body: TenantTTL, request: Request) -> dict[str, Any]:
    """The tenant's block TTL from now on, its blocks already cached included; concurrent changes in
    several regions resolve to the shortest."""
    _known(request, tenant)
    out = dict(await asyncio.to_thread(_caches(request)[0].set_tenant_ttl, tenant, body.ttl))
    return _with(out, await submit(request, "ttl", tenant, body.ttl))


@router.put("/cache/pins/{key}")
async def pin(key: str, request: Request) -> dict[str, Any]:
    """Keep the prefix ending at this block from eviction (an erasure or invalidation still wins)."""
    return await _pin(key, request, True)


@router.delete("/cache/pins/{key}")
async def unpin(key: str, request: Request) -> dict[str, Any]:
    """Release an operator pin (a concurrent pin and unpin in two regions resolve to unpinned)."""
    return await _pin(key, request, False)


async def _pin(key: str, request: Request, pinned: bool) -> dict[str, Any]:
    k = _block_key(key)
    cache = _caches(request)[0]
    n = await asyncio.to_thread(cache.pin_prefix if pinned else cache.unpin_prefix, k)
    return _with({"key": k.hex(), "pinned": pinned, "blocks": n}, await submit(request, "pin", k, pinned))


@router.get("/replication")
async def replication(request: Request, tenant: str | None = None, key: str | None = None) -> dict[str, Any]:
    """This worker's follower (applied seq, errors, caught up) and, with ``tenant`` (its erasures and
    TTLs) or ``key`` (a block key's invalidations and pins), what each process of this region
    reported applying, by update id (``verified`` per process: an erasure is complete in this
    region when every process reports it verified)."""
    rep = getattr(request.app.state, "replication", None)
    if rep is None:
        raise APIError(404, "replication is not configured on this server ([replication] in the config)")
    out: dict[str, Any] = {"follower": await asyncio.to_thread(rep.status)}
    if tenant is not None or key is not None:
        from ..replication.log import LinkDown

        match = f"t:{tenant}" if tenant is not None else f"p:{_block_key(key or '').hex()}"
        try:
            out["results"] = await asyncio.to_thread(rep.results, match)
        except LinkDown as exc:
            raise APIError(503, f"the region's replication log is unreachable ({exc})") from None
    return out
