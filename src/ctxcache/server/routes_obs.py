"""Operations routes: /readyz, the dashboard page and its JSON feed (per-tenant table: admin only)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from ..observability.ab import _pct
from ..observability.exporter import evictions_by_reason
from ..observability.health import readiness
from ..observability.service import Observability
from .deps import given_key
from .pages import page
from .routes_admin import admin_digests, check_admin

router = APIRouter(tags=["ops"])


def _obs(request: Request) -> Observability:
    obs: Observability = request.app.state.obs
    return obs


def is_admin(request: Request) -> bool:
    """Whether the request opens the dashboard's admin views: an admin key of /v1/admin (the same
    check) as ``X-Admin-Key`` (the page's header) or ``Authorization: Bearer``. No key sent: False,
    the public view. Any other key is refused as /v1/admin refuses it (403, the same body). The
    deprecated ``[observability] admin_key`` opens the dashboard as it did, and nothing else."""
    given = request.headers.get("x-admin-key") or given_key(request)
    if not given:
        return False
    check_admin(request, given, _obs(request).cfg.admin_key)
    return True


@router.get("/readyz", responses={503: {"description": "not ready: the body names the failed check"}})
async def readyz(request: Request) -> JSONResponse:
    """Readiness: model loaded, worker alive and not stuck, every tier reachable. 503 names what is wrong."""
    state, obs = request.app.state.ctx, _obs(request)
    worker = state.worker
    task = getattr(worker, "_task", None)
    ok, body = readiness(
        model_loaded=state.lm is not None,
        worker_running=task is not None and not task.done(),
        busy_since=getattr(worker, "busy_since", None) if worker.busy else None,
        stall_s=obs.cfg.worker_stall_s,
        tiers=obs.stats().get("tiers", {}),
    )
    events = getattr(request.app.state, "events", None)
    body["events_worker"] = events.worker if events is not None else None  # a router maps its events by it
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get("/dashboard", response_class=HTMLResponse)
async def dashboard() -> HTMLResponse:
    """The live dashboard (a static page polling /dashboard/data)."""
    return HTMLResponse(page("ctxcache.server", "dashboard.html"), headers={"Cache-Control": "no-store"})


def _tiers(s: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": n, "kind": t.get("kind"), "bytes": t.get("bytes", 0), "capacity": t.get("capacity", 0),
         "blocks": t.get("blocks", 0), "up": bool(t.get("healthy", True)), "corrupt": t.get("corrupt", 0),
         "deletes_paused": bool(t.get("deletes_paused", False)), "masters_down": list(t.get("masters_down") or [])}
        for n, t in s.get("tiers", {}).items()
    ]  # fmt: skip


@router.get("/dashboard/data", responses={403: {"description": "a key was sent and is not an admin key"}})
async def dashboard_data(request: Request) -> dict[str, Any]:
    """Everything the dashboard shows; ``tenants`` only with an admin key (403 if another key was sent)."""
    obs = _obs(request)
    admin = is_admin(request)
    s = obs.stats()
    snap = obs.observer.snapshot()
    totals, by_tier = obs.requests.snapshot()
    recent = list(obs.recent)
    ttfts = [r["ttft_s"] for r in recent if r["ttft_s"] is not None]
    prompt = sum(t.prompt_tokens for t in totals.values())
    hit = sum(t.hit_tokens for t in totals.values())
    out: dict[str, Any] = {
        "now": time.time(),
        "policy": obs.policy,
        "window_s": obs.cfg.window_s,
        "totals": {
            "requests": sum(t.requests for t in totals.values()),
            "prompt_tokens": prompt,
            "hit_tokens": hit,
            "hit_ratio": hit / prompt if prompt else 0.0,
            "saved_s_estimated": sum(t.saved_s for t in totals.values()),
            "blocks": s.get("blocks", 0),
            "bytes": s.get("bytes", 0),
            "corrupt_blocks": s.get("corrupt", 0),
        },
        "ttft": {
            "p50_s": _pct(ttfts, 0.5) if ttfts else None,
            "p95_s": _pct(ttfts, 0.95) if ttfts else None,
            "requests": len(ttfts),
        },  # fmt: skip
        "indicators": {
            "hit_rate_slope_pct_per_min": snap.hit_rate_slope_pct_per_min,
            "eviction_entropy": snap.eviction_entropy,
            "context_age_skew": snap.context_age_skew,
        },
        "evictions_by_reason": evictions_by_reason(s),
        "hit_tokens_by_tier": by_tier,
        "tiers": _tiers(s),
        "history": list(obs.history),
        "admin": admin,
        "admin_configured": bool(admin_digests(request, obs.cfg.admin_key)),
    }
    if admin:
        out["tenants"] = [
            {"tenant": tenant, "ab_group": group, "requests": t.requests, "prompt_tokens": t.prompt_tokens,
             "hit_tokens": t.hit_tokens, "hit_ratio": t.hit_tokens / t.prompt_tokens if t.prompt_tokens else 0.0,
             "saved_s_estimated": t.saved_s}
            for (tenant, group), t in sorted(totals.items())
        ]  # fmt: skip
    return out
