"""POST /v1/chat/completions in OpenAI's shape, streaming as server-sent events.

Caching is automatic: every request reuses its longest cached block prefix, and (with
``auto_cache``) stores its prompt's full blocks. ``usage.prompt_tokens_details.cached_tokens`` is
the reused part.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from ..integrations import SamplingParams
from .deps import APIError, check_cache_salt, error_body, tenant_for
from .jobs import ChatJob, Messages, Outcome, ServerState, collect, events, record, start
from .schemas import ChatCompletion, ChatCompletionRequest
from .sse import data_line, with_keepalive
from .worker import Job

router = APIRouter(tags=["OpenAI"])
_ERRORS: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"description": "chat.completion.chunk objects, then [DONE]"}}}},
    400: {"description": "invalid request (the message names the field)"},
    401: {"description": "missing or invalid API key"},
    404: {"description": "unknown model"},
    429: {"description": "queue full; see Retry-After"},
}


def to_messages(body: ChatCompletionRequest) -> Messages:
    out = []
    for m in body.messages:
        text = m.content if isinstance(m.content, str) else "\n".join(p.text for p in m.content)
        out.append({"role": "system" if m.role == "developer" else m.role, "content": text})
    return out


def _params(state: ServerState, body: ChatCompletionRequest) -> tuple[SamplingParams, bool]:
    for name in ("max_tokens", "max_completion_tokens"):  # both are checked, the newer one wins
        if (value := getattr(body, name)) is not None:
            state.check_max_tokens(value, name)
    given = body.max_completion_tokens or body.max_tokens
    max_tokens = given or state.cfg.default_max_tokens
    return SamplingParams(max_tokens, body.temperature, body.top_p, check_stops(body.stop), body.seed), given is None


def check_stops(stop: str | list[str] | None) -> tuple[str, ...]:
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > 4:
        raise APIError(400, f"stop: at most 4 sequences are allowed, got {len(stops)}", param="stop")
    if any(not s for s in stops):
        raise APIError(400, "stop: stop sequences must be non-empty strings", param="stop")
    return tuple(stops)


def _usage(out: Outcome) -> dict[str, Any]:
    u, n = out.usage, out.generation.completion_tokens
    prompt = u.cache_read_tokens + u.uncached_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": n,
        "total_tokens": prompt + n,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
    }


def _finish(out: Outcome) -> str:
    return "length" if out.generation.finish_reason == "length" else "stop"


@router.post("/v1/chat/completions", response_model=ChatCompletion, responses=_ERRORS)
async def chat_completions(
    body: ChatCompletionRequest, request: Request, tenant: str = Depends(tenant_for)
) -> ChatCompletion | StreamingResponse:
    """Create a chat completion (``stream: true`` for server-sent events)."""
    state: ServerState = request.app.state.ctx
    arrived = getattr(request.state, "arrived", time.perf_counter())
    rid = getattr(request.state, "request_id", None)
    state.check_model(body.model)
    params, clamp = _params(state, body)
    salt = check_cache_salt(state, tenant, body.cache_salt)
    job = ChatJob(to_messages(body), params, tenant, arrived, clamp_max_tokens=clamp, cache_salt=salt, request_id=rid)
    handle = await start(state, job)
    rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            with_keepalive(_sse(state, handle, rid, created, include_usage), state.cfg.keepalive_s, comment=True),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    text, out = await collect(state, handle)
    return ChatCompletion.model_validate(
        {
            "id": rid,
            "created": created,
            "model": state.model_id,
            "choices": [{"message": {"content": text}, "finish_reason": _finish(out)}],
            "usage": _usage(out),
            "ctxcache": out.extension(),
        }
    )


async def _sse(state: ServerState, handle: Job, rid: str, created: int, include_usage: bool) -> AsyncIterator[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        body = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": state.model_id,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }
        return f"data: {json.dumps(body)}\n\n"

    try:
        yield chunk({"role": "assistant", "content": ""})
        async for ev in events(handle):
            if ev.kind == "delta":
                yield chunk({"content": ev.data})
            elif ev.kind == "done":
                out: Outcome = ev.data
                record(state, out)
                yield chunk({}, _finish(out), ctxcache=out.extension())
                if include_usage:
                    last = json.loads(chunk({})[6:])
                    last.update(choices=[], usage=_usage(out), ctxcache=out.extension())
                    yield f"data: {json.dumps(last)}\n\n"
            elif ev.kind == "error":
                yield data_line(error_body("/v1/chat/completions", ev.data[0], ev.data[1]))
        yield "data: [DONE]\n\n"
    finally:
        handle.cancel()  # a client that disconnects stops the decode
