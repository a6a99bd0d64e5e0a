"""The router's HTTP app: the two chat APIs routed by cache, everything else passed through."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .dashboard import add_dashboard
from .proxy import Proxy, Router
from .relay import Receive, Scope, Send
from .upstream import Upstream

_CHAT = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}


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


class RouterApp(FastAPI):
    """FastAPI, except that a POST to one of the two chat endpoints goes straight to the proxy's
    plain-ASGI path: FastAPI's routing, request and response objects and middleware cost more
    CPU than the proxying itself (docs/routing.md, "Router overhead"). Everything else (and
    another method on those paths: the pass-through) is FastAPI's."""

    def __init__(self, state: dict[str, Proxy], **kw: Any) -> None:
        super().__init__(**kw)
        self._proxy_state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        if scope["type"] == "http" and scope["method"] == "POST":
            api = _CHAT.get(scope["path"])
            if api is not None:
                return await self._proxy_state["proxy"].serve(scope, receive, send, api)
        await super().__call__(scope, receive, send)  # type: ignore[arg-type]


class _Passthrough(Response):
    """A response that is the proxy itself: the request, its body unread, sent on as it came."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:  # type: ignore[override]
        await self.proxy.serve(scope, receive, send, "other")


def create_router_app(router: Router) -> FastAPI:
    state: dict[str, Proxy] = {}
    app = RouterApp(state, title="ctxcache router", lifespan=_lifespan(router, state), docs_url=None, redoc_url=None)

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
        return _Passthrough(state["proxy"])

    return app
