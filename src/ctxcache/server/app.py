"""The FastAPI app: OpenAI and Anthropic routes, models, health, metrics, errors in each API's shape."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..errors import ConfigError
from ..events.runtime import EventsConfig, start_events
from ..observability.events import EventsCollector
from ..observability.service import ObsConfig, Observability
from ..replication.config import ReplicationConfig
from ..replication.metrics import FollowerCollector
from .config import ServerConfig
from .deps import APIError, describe_validation, error_response, invalid_field, tenant_for, unsupported_field
from .guards import RequestGuard
from .jobs import ServerState
from .metrics import CONTENT_TYPE, Metrics
from .openapi import publish_limits
from .routes_admin import router as admin_router
from .routes_anthropic import router as anthropic_router
from .routes_obs import router as obs_router
from .routes_openai import router as openai_router
from .routes_regions import router as regions_router
from .routes_text import router as text_router
from .routes_text import tools as token_router
from .schemas import ModelCard, ModelList

if TYPE_CHECKING:
    from ..integrations.transformers import CachedLM

SWEEP_EVERY_S = 5.0
_DESCRIPTION = """A context-cached model server. Prompts reuse the KV of their longest cached block
prefix; `usage` reports cached tokens (OpenAI `prompt_tokens_details.cached_tokens`, Anthropic
`cache_read_input_tokens` / `cache_creation_input_tokens`). See docs/serving.md."""


class _Stamp:
    """Pure ASGI middleware: stamp the arrival time and count every API response by status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})["arrived"] = time.perf_counter()
        status = 500

        async def send_status(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope.get("path", "")
            api = "anthropic" if path.startswith("/v1/messages") else "openai" if path.startswith("/v1/chat") else None
            if api is not None:
                self.metrics.requests.labels(api, str(status)).inc()


async def _tick(obs: Observability) -> None:
    while True:
        await asyncio.sleep(obs.cfg.log_every_s)
        obs.tick()


async def _sweep(state: ServerState) -> None:
    while True:
        await asyncio.sleep(SWEEP_EVERY_S)
        state.pins.sweep()


def _lifespan(
    state: ServerState, observability: Observability
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.worker.start()
        if app.state.replication_config is not None:  # before serving: apply what was missed while down
            app.state.replication = await asyncio.to_thread(_start_replication, app, state)
        if app.state.events_config is not None:  # KV events (docs/events.md): off without a Redis tier
            app.state.events = start_events(state.lm.cache, app.state.events_config)
        background = [asyncio.create_task(_sweep(state)), asyncio.create_task(_tick(observability))]
        try:
            yield
        finally:
            for task in background:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            observability.close()
            if app.state.events is not None:
                app.state.events.close()
                app.state.events = None
            if app.state.replication is not None:
                app.state.replication.close()
                app.state.replication = None
            await state.worker.stop()
            for lane in (state.tokenizer, state.tokenizer_large):
                lane.shutdown(wait=False, cancel_futures=True)
            state.pins.clear()
            if getattr(app.state, "semantic", None) is not None:
                app.state.semantic.close()

    return lifespan


def _replication(app: FastAPI, cfg: ServerConfig, lm: Any, state: ServerState) -> None:
    """[replication]: checked now (a missing url fails before serving), started by the lifespan."""
    rc = app.state.replication_config = ReplicationConfig.from_dict(cfg.replication)
    app.state.replication = None
    if rc is not None and rc.url is None and not any(t.kind == "redis" for t in lm.cache.tiers):
        raise ConfigError('[replication] needs url = "redis://..." (there is no Redis tier to take it from)')
    state.metrics.registry.register(
        FollowerCollector(lambda: app.state.replication.status() if app.state.replication is not None else None)
    )


def _start_replication(app: FastAPI, state: ServerState) -> Any:
    from ..events.runtime import default_worker
    from ..replication.config import WorkerReplication

    cfg = app.state.replication_config
    rep = WorkerReplication(app.state.obs.cache, cfg, cfg.worker or default_worker(),
                            getattr(app.state, "semantic", None))  # fmt: skip
    rep.start()
    return rep


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(request, exc.status, exc.message, param=exc.param, code=exc.code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        field = unsupported_field(exc)
        code = "unsupported_parameter" if field else None
        return error_response(request, 400, describe_validation(exc), param=field or invalid_field(exc), code=code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        msg = str(exc.detail)
        if exc.status_code == 404:
            msg = f"no route {request.method} {request.url.path}; see /docs for the API"
        code = "unknown_url" if exc.status_code == 404 else None
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Starlette names the first route of the path only
            headers = {**(headers or {}), "Allow": ", ".join(_allowed(request))}
        return error_response(request, exc.status_code, msg, code=code, headers=headers)


def _allowed(request: Request) -> list[str]:
    """Every method some route of this path takes (a path may have a route per method)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def _include_routers(app: FastAPI, cfg: ServerConfig, state: ServerState) -> None:
    """The API's routers, the opt-in semantic cache, and the limits the OpenAPI schema publishes."""
    app.include_router(openai_router)
    app.include_router(anthropic_router)
    app.include_router(text_router)
    app.include_router(token_router)
    app.include_router(admin_router)
    app.include_router(regions_router)
    app.include_router(obs_router)
    if cfg.semantic.get("tenants"):  # opt-in: see routes_semantic.py
        from .routes_semantic import build_semantic, install

        install(app, *build_semantic(cfg.semantic, state.model_id))
    publish_limits(app, state.max_tokens_limit, state.model_names, getattr(state.lm, "vocab_size", None))


def create_app(
    lm: CachedLM, cfg: ServerConfig | None = None, *, model_id: str | None = None, obs: ObsConfig | None = None
) -> FastAPI:
    """Build the app around a loaded CachedLM. Run it with uvicorn (the lifespan starts the worker)."""
    cfg = cfg or ServerConfig()
    state = ServerState(lm, cfg, model_id or cfg.model_id or "model")
    state.obs = observability = Observability(lm.cache, state.metrics.registry, obs or cfg.observability)
    # No slash redirects: RequestGuard serves "/v1/x/" as "/v1/x" (a 307 to a POST is an empty reply).
    app = FastAPI(
        title="ctxcache",
        version=__version__,
        description=_DESCRIPTION,
        lifespan=_lifespan(state, observability),
        redirect_slashes=False,
    )
    app.state.ctx = state
    app.state.obs = observability
    app.state.events_config, app.state.events = EventsConfig.from_dict(cfg.events), None
    state.metrics.registry.register(EventsCollector(lambda: app.state.events))
    _replication(app, cfg, lm, state)
    app.add_middleware(_Stamp, metrics=state.metrics)
    app.add_middleware(RequestGuard, max_body_bytes=int(cfg.max_body_bytes))  # outermost

    _add_error_handlers(app)
    _include_routers(app, cfg, state)

    @app.get("/v1/models", response_model=ModelList, tags=["models"])
    async def list_models(tenant: str = Depends(tenant_for)) -> ModelList:
        """The served model (fields for both the OpenAI and the Anthropic clients)."""
        created_at = datetime.fromtimestamp(state.created, UTC).isoformat().replace("+00:00", "Z")
        cards = [
            ModelCard(id=name, created=state.created, created_at=created_at, display_name=name)
            for name in state.model_names
        ]
        return ModelList(data=cards, first_id=cards[0].id, last_id=cards[-1].id)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, Any]:
        """Liveness (the process answers) and a summary: model, queue, cache and pins. See /readyz."""
        s = observability.cache.stats()  # not lm.cache: group b's jobs swap that
        return {
            "status": "ok",
            "model": state.model_id,
            "queue_depth": state.worker.depth,
            "busy": state.worker.busy,
            "jobs_done": state.worker.jobs_done,
            "cache": {
                **{k: s[k] for k in ("blocks", "bytes", "hit_tokens", "lookup_tokens", "token_hit_ratio")},
                "tier_bytes": {name: t["bytes"] for name, t in s["tiers"].items()},  # RAM apart from disk
            },
            "block_size": lm.block_size,
            "pins": state.pins.stats(),
        }

    @app.get("/metrics", tags=["ops"], response_class=Response)
    async def metrics() -> Response:
        """Prometheus text format."""
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    return app
