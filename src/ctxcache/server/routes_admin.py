"""Admin routes: erase a tenant's cache, flush everything, read a tenant's usage.

Only the admin key opens them (``[cache.tenancy] admin_keys``, or the ``CTXCACHE_ADMIN_KEY``
environment variable): no tenant key can read, count or erase anything here, its own data
included. Erasure and flush run off the event loop (they wait for disk and Redis deletes) and
each writes one line to the ``ctxcache.audit`` log.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from typing import Any

from fastapi import APIRouter, Depends, Request

from ..engine.tenancy import key_digest
from .deps import APIError, given_key

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "invalid tenant id"},
    401: {"description": "missing admin key"},
    403: {"description": "not an admin key, or the admin API is disabled (no admin key configured)"},
    404: {"description": "unknown tenant"},
}
router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=_ERRORS)


def require_admin(request: Request) -> None:
    tenancy = request.app.state.ctx.lm.cache.tenancy
    env = os.environ.get("CTXCACHE_ADMIN_KEY")
    digests = set(tenancy.admin_digests if tenancy is not None else ()) | ({key_digest(env)} if env else set())
    if not digests:
        raise APIError(403, "the admin API is disabled: configure [cache.tenancy] admin_keys or CTXCACHE_ADMIN_KEY")
    given = given_key(request)
    if not given:
        raise APIError(401, "missing admin key: send 'Authorization: Bearer <admin key>'")
    d = key_digest(given)
    if not any(hmac.compare_digest(d, a) for a in digests):
        raise APIError(403, "this key is not an admin key")


def _known(request: Request, tenant: str) -> None:
    tenancy = request.app.state.ctx.lm.cache.tenancy
    if tenancy is not None and tenant not in tenancy.tenants:
        raise APIError(404, f"unknown tenant {tenant!r}")
    if len(tenant) > 64:
        raise APIError(400, "tenant ids are at most 64 characters")


@router.delete("/tenants/{tenant}/cache", dependencies=[Depends(require_admin)])
async def erase_tenant(tenant: str, request: Request) -> dict[str, Any]:
    """Remove every block of the tenant from every tier (RAM, disk files, Redis keys), verified."""
    _known(request, tenant)
    state = request.app.state.ctx
    state.pins.clear_tenant(tenant)  # cache_control pins would keep its blocks in use
    return dict(await asyncio.to_thread(state.lm.cache.erase_tenant, tenant))


@router.post("/cache/flush", dependencies=[Depends(require_admin)])
async def flush(request: Request) -> dict[str, Any]:
    """Erase every tenant's blocks from every tier (vLLM's reset_prefix_cache, SGLang's flush_cache)."""
    state = request.app.state.ctx
    state.pins.clear()
    return dict(await asyncio.to_thread(state.lm.cache.clear))


@router.get("/tenants/{tenant}/usage", dependencies=[Depends(require_admin)])
async def usage(tenant: str, request: Request) -> dict[str, Any]:
    """Bytes and quota per tier, blocks, lookups and hit tokens of one tenant."""
    _known(request, tenant)
    return dict(request.app.state.ctx.lm.cache.tenant_usage(tenant))
