"""Admin routes: erase a tenant's cache, flush everything, read a tenant's usage and per-tenant metrics.

Only an admin key opens them: ``[admin] key`` in the server config, ``[cache.tenancy]
admin_keys`` or the ``CTXCACHE_ADMIN_KEY`` environment variable. ``check_admin`` is the one check,
for every route under /v1/admin (the semantic cache's included, through ``require_admin``) and for
the dashboard's admin views (routes_obs): no tenant key can read, count or erase anything there,
its own data included. Erasure and flush run off the event loop (they wait for disk and Redis deletes) and
each writes one line to the ``ctxcache.audit`` log.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from prometheus_client import generate_latest

from ..engine.tenancy import key_digest, request_digest
from .deps import APIError, given_key, main_cache
from .metrics import CONTENT_TYPE
from .replicate import submit  # every region erases it too (docs/regions.md)

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "invalid tenant id"},
    401: {"description": "missing admin key"},
    403: {"description": "not an admin key, or the admin API is disabled (no admin key configured)"},
    404: {"description": "unknown tenant"},
}
router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=_ERRORS)


def admin_digests(request: Request, *extra: str | None) -> set[str]:
    """Digests of the configured admin keys, plus ``extra`` (the dashboard's deprecated key)."""
    tenancy = main_cache(request).tenancy
    keys = {os.environ.get("CTXCACHE_ADMIN_KEY"), request.app.state.ctx.cfg.admin.get("key"), *extra}
    return set(tenancy.admin_digests if tenancy is not None else ()) | {key_digest(k) for k in keys if k}


def require_admin(request: Request) -> None:
    """The dependency of every /v1/admin route: the key of ``Authorization: Bearer`` (or ``x-api-key``)."""
    check_admin(request, given_key(request))


def check_admin(request: Request, given: str, *extra: str | None) -> None:
    """Raise unless ``given`` is an admin key: 403 when none is configured, 401 when none is given,
    403 for any other key (a tenant's included)."""
    digests = admin_digests(request, *extra)
    if not digests:
        raise APIError(
            403, "the admin API is disabled: configure [admin] key, [cache.tenancy] admin_keys or CTXCACHE_ADMIN_KEY"
        )
    if not given:
        raise APIError(401, "missing admin key: send 'Authorization: Bearer <admin key>'")
    d = request_digest(given)
    if not any(hmac.compare_digest(d, a) for a in digests):
        raise APIError(403, "this key is not an admin key")


def _known(request: Request, tenant: str) -> None:
    tenancy = main_cache(request).tenancy
    if tenancy is not None and tenant not in tenancy.tenants:
        raise APIError(404, f"unknown tenant {tenant!r}")
    if len(tenant) > 64:
        raise APIError(400, "tenant ids are at most 64 characters")


def _caches(request: Request) -> list[Any]:
    """The main cache and every A/B group's own cache: a tenant's blocks may be in any."""
    return [main_cache(request), *request.app.state.obs.alt_caches.values()]


def _merged(results: list[Any]) -> dict[str, Any]:
    out = dict(results[0])
    for r in results[1:]:
        for k in ("erased_blocks", "found_in_storage", "in_use"):
            if k in out:
                out[k] += r.get(k, 0)
        out["verified"] = out["verified"] and r["verified"]
    return out


@router.delete("/tenants/{tenant}/cache", dependencies=[Depends(require_admin)])
async def erase_tenant(tenant: str, request: Request) -> dict[str, Any]:
    """Remove every block of the tenant from every tier (RAM, disk files, Redis keys), verified."""
    _known(request, tenant)
    state = request.app.state.ctx
    state.pins.clear_tenant(tenant)  # cache_control pins would keep its blocks in use
    out = _merged([await asyncio.to_thread(c.erase_tenant, tenant) for c in _caches(request)])
    rep = await submit(request, "erase_tenant", tenant)
    return out if rep is None else {**out, "replication": rep}


@router.post("/cache/flush", dependencies=[Depends(require_admin)])
async def flush(request: Request) -> dict[str, Any]:
    """Erase every tenant's blocks from every tier (vLLM's reset_prefix_cache, SGLang's flush_cache)."""
    state = request.app.state.ctx
    state.pins.clear()
    return _merged([await asyncio.to_thread(c.clear) for c in _caches(request)])


@router.get("/tenants/{tenant}/usage", dependencies=[Depends(require_admin)])
async def usage(tenant: str, request: Request) -> dict[str, Any]:
    """Bytes and quota per tier, blocks, lookups and hit tokens of one tenant."""
    _known(request, tenant)
    return dict(main_cache(request).tenant_usage(tenant))


@router.get("/metrics", dependencies=[Depends(require_admin)], response_class=Response)
async def tenant_metrics(request: Request) -> Response:
    """Per-tenant series in Prometheus text format (the public /metrics carries no tenant label)."""
    return Response(generate_latest(request.app.state.obs.admin_registry), media_type=CONTENT_TYPE)
