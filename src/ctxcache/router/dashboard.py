"""The router's fleet panel: ``GET /dashboard`` (a static page polling ``/dashboard/data``).

What it shows is read from the router's own state, the same that ``/metrics`` serves: requests,
prompt tokens, predicted and reported cached tokens per worker (RouterMetrics' counters),
health and ejections (the pool), the index's size (BlockIndex.stats) and the KV events' lag
(--redis). Nothing here counts anything: one owner per number, this is a view of them.

Imbalance is the busiest healthy worker's requests over the mean of the healthy workers' (1.0:
even; the fleet simulation's goal is max/min <= 1.5, which needs every worker to have served).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import Counter, Gauge

from ..server.pages import page
from .proxy import Router


def _by(counter: Counter | Gauge, label: str) -> dict[str, float]:
    """A counter's totals (a gauge's values) summed by one label."""
    out: dict[str, float] = {}
    for metric in counter.collect():
        for s in metric.samples:
            if s.name.endswith("_total") or isinstance(counter, Gauge):
                key = s.labels.get(label, "")
                out[key] = out.get(key, 0.0) + s.value
    return out


def _ok_requests(counter: Counter) -> dict[str, float]:
    out: dict[str, float] = {}
    for metric in counter.collect():
        for s in metric.samples:
            if s.name.endswith("_total") and s.labels.get("outcome") not in ("retried",):
                out[s.labels["worker"]] = out.get(s.labels["worker"], 0.0) + s.value
    return out


def fleet_data(router: Router) -> dict[str, Any]:
    m = router.metrics
    answered = _ok_requests(m.requests)
    prompt, predicted, reported = _by(m.prompt_tokens, "worker"), _by(m.predicted, "worker"), _by(m.reported, "worker")
    ejections, streams = _by(m.ejections, "worker"), _by(m.stream_errors, "worker")
    in_flight = _by(m.in_flight, "worker")
    workers: list[dict[str, Any]] = []
    for w in router.pool.workers.values():
        workers.append({
            "url": w.url, "healthy": w.healthy, "requests": int(answered.get(w.url, 0)), "in_flight": int(in_flight.get(w.url, 0)),
            "prefill_tokens": w.load.prefill_tokens, "prompt_tokens": int(prompt.get(w.url, 0)),
            "predicted_cached_tokens": int(predicted.get(w.url, 0)), "reported_cached_tokens": int(reported.get(w.url, 0)),
            "ejections": int(ejections.get(w.url, 0)), "stream_errors": int(streams.get(w.url, 0)),
            "last_error": w.last_error, "events_worker": w.events_worker,
        })  # fmt: skip
    up: list[int] = [w["requests"] for w in workers if w["healthy"]]
    mean = sum(up) / len(up) if up else 0.0
    overhead = {s.name: s.value for metric in m.overhead.collect() for s in metric.samples}
    n = overhead.get("ctxcache_router_overhead_seconds_count", 0.0)
    totals = {k: sum(w[k] for w in workers) for k in ("requests", "prompt_tokens", "predicted_cached_tokens",
                                                        "reported_cached_tokens", "ejections", "stream_errors")}  # fmt: skip
    return {
        "workers": workers,
        "totals": {**totals, "retries": int(sum(_by(m.retries, "api").values())), "healthy_workers": len(up)},
        "imbalance": round(max(up) / mean, 3) if mean else None,
        "decisions": {k: int(v) for k, v in _by(m.decisions, "reason").items()},
        "before_send_mean_ms": round(1e3 * overhead.get("ctxcache_router_overhead_seconds_sum", 0.0) / n, 3)
        if n
        else None,
        "index": router.index.stats(),
        "events": router.events.stats() if router.events is not None else None,
    }


def add_dashboard(app: FastAPI, router: Router) -> None:
    @app.get("/dashboard", include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        return HTMLResponse(page("ctxcache.router", "fleet.html"), headers={"Cache-Control": "no-store"})

    @app.get("/dashboard/data", include_in_schema=False)
    async def dashboard_data() -> JSONResponse:
        return JSONResponse(fleet_data(router), headers={"Cache-Control": "no-store"})
