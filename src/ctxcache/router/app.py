"""The router's HTTP app: the two chat APIs routed by cache, everything else passed through."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .dashboard import add_dashboard
from .proxy import Proxy, Router
from .upstream import Upstream


def _lifespan(router: Router, state: dict[str, Proxy]) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # httpx for the health checks; the request path has its own keep-alive client (upstream.py says why)
        async with httpx.AsyncClient(timeout=router.upstream_timeout_s) as client:
            upstream = Upstream()
            state["proxy"] = Proxy(router, upstream)
            await router.pool.check_all(client)  # who is up (and their events ids) before the first request
            router.pool.start(client)
            if router.events is not None:
                router.events.start()
            try:
                yield
            finally:
                if router.events is not None:
                    router.events.stop()
                await router.pool.stop()
                await upstream.aclose()

    return lifespan


def create_router_app(router: Router) -> FastAPI:
    state: dict[str, Proxy] = {}
    app = FastAPI(title="ctxcache router", lifespan=_lifespan(router, state), docs_url=None, redoc_url=None)

    @app.post("/v1/chat/completions", include_in_schema=False)
    async def chat(request: Request) -> Response:
        return await state["proxy"].handle(request, "openai")

    @app.post("/v1/messages", include_in_schema=False)
    async def messages(request: Request) -> Response:
        return await state["proxy"].handle(request, "anthropic")

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        up = len(router.pool.healthy())
        body = {"ready": up > 0, "healthy_workers": up, "workers": router.pool.state()}
        return JSONResponse(body, status_code=200 if up else 503)

    @app.get("/router/state", include_in_schema=False)
    async def router_state() -> JSONResponse:
        return JSONResponse({"workers": router.pool.state(), "index": router.index.stats(),
                             "speculative_keys": len(router.spec),
                             "events": router.events.stats() if router.events is not None else None,
                             "history_keys": len(router.history) if router.history is not None else None})  # fmt: skip

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        m = router.metrics
        for w in router.pool.workers.values():
            m.healthy.labels(w.url).set(1 if w.healthy else 0)
        m.observe_index(router.index.stats())
        if router.events is not None:
            m.observe_events(router.events.stats())
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    add_dashboard(app, router)  # before the pass-through, which would send /dashboard to a worker

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"], include_in_schema=False)
    async def passthrough(request: Request, path: str) -> Response:
        return await state["proxy"].handle(request, "other")

    return app
