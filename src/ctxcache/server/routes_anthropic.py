"""POST /v1/messages in Anthropic's shape, with ``cache_control`` breakpoints.

A breakpoint ({"type": "ephemeral", "ttl": "5m" | "1h"}) on a system or message text block, or at
the top level (the whole prompt), marks a prefix to keep: the request stores the full blocks up to
its last breakpoint, and the server pins every marked prefix for its ttl (see pins.py). Without
breakpoints, full blocks are cached automatically when ``auto_cache`` is on.

usage: cache_read_input_tokens were reused, cache_creation_input_tokens were written to the cache,
input_tokens are the rest of the prompt (prefilled, not cached), as in Anthropic's API.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from ..integrations import SamplingParams
from ..usage import Usage
from .deps import APIError, error_body, tenant_for
from .jobs import Breakpoint, ChatJob, Messages, Outcome, ServerState, collect, events, record, start
from .pins import TTL_SECONDS
from .schemas import MessageResponse, MessagesRequest, TextBlock
from .sse import event, with_keepalive
from .worker import Job

router = APIRouter(tags=["Anthropic"])
MAX_BREAKPOINTS = 4
_ERRORS: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {
            "text/event-stream": {
                "schema": {"description": "message_start, content_block_*, ping, message_delta, message_stop events"}
            }
        }
    },
    400: {"description": "invalid request (the message names the field)"},
    401: {"description": "missing or invalid API key"},
    404: {"description": "unknown model"},
    429: {"description": "queue full; see Retry-After"},
}


def to_messages(body: MessagesRequest) -> tuple[Messages, list[Breakpoint]]:
    msgs: Messages = []
    marks: list[Breakpoint] = []

    def add(role: str, content: str | list[TextBlock]) -> None:
        blocks = [TextBlock(type="text", text=content)] if isinstance(content, str) else content
        texts: list[str] = []
        for b in blocks:
            texts.append(b.text)
            if b.cache_control is not None:
                prefix = [*msgs, {"role": role, "content": "\n".join(texts)}]
                marks.append(Breakpoint(prefix, b.cache_control.ttl, TTL_SECONDS[b.cache_control.ttl]))
        msgs.append({"role": role, "content": "\n".join(texts)})

    if body.system:
        add("system", body.system)
    for m in body.messages:
        add(m.role, m.content)
    if body.cache_control is not None:
        marks.append(Breakpoint(list(msgs), body.cache_control.ttl, TTL_SECONDS[body.cache_control.ttl]))
    if len(marks) > MAX_BREAKPOINTS:
        raise APIError(400, f"a request may have at most {MAX_BREAKPOINTS} cache_control breakpoints, got {len(marks)}")
    return msgs, marks


def _usage(out: Outcome | None, usage: Usage, output_tokens: int) -> dict[str, Any]:
    created = usage.cache_creation_tokens
    by_ttl = out.created_by_ttl if out is not None else {"5m": created, "1h": 0}
    return {
        "input_tokens": usage.uncached_tokens - created,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": created,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "cache_creation": {"ephemeral_5m_input_tokens": by_ttl["5m"], "ephemeral_1h_input_tokens": by_ttl["1h"]},
    }


def _stop_reason(out: Outcome) -> str:
    g = out.generation
    if g.finish_reason == "length":
        return "max_tokens"
    return "stop_sequence" if g.stop_sequence is not None else "end_turn"


@router.post("/v1/messages", response_model=MessageResponse, responses=_ERRORS)
async def messages(
    body: MessagesRequest, request: Request, tenant: str = Depends(tenant_for)
) -> MessageResponse | StreamingResponse:
    """Create a message (``stream: true`` for server-sent events)."""
    state: ServerState = request.app.state.ctx
    arrived = getattr(request.state, "arrived", time.perf_counter())
    rid = getattr(request.state, "request_id", None)
    state.check_model(body.model)
    state.check_max_tokens(body.max_tokens, "max_tokens")
    stops = tuple(body.stop_sequences or ())
    if any(not s for s in stops):
        raise APIError(400, "stop_sequences: stop sequences must be non-empty strings")
    msgs, marks = to_messages(body)
    params = SamplingParams(body.max_tokens, body.temperature, body.top_p or 1.0, stops, None)
    job = ChatJob(msgs, params, tenant, arrived, marks, request_id=rid)
    handle = await start(state, job)
    mid = f"msg_{uuid.uuid4().hex}"
    if body.stream:
        stream = with_keepalive(_sse(state, handle, mid, len(job.ids)), state.cfg.keepalive_s, comment=False)
        return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    text, out = await collect(state, handle)
    return MessageResponse.model_validate(
        {
            "id": mid,
            "model": state.model_id,
            "content": [{"type": "text", "text": text}],
            "stop_reason": _stop_reason(out),
            "stop_sequence": out.generation.stop_sequence,
            "usage": _usage(out, out.usage, out.generation.completion_tokens),
            "ctxcache": out.extension(),
        }
    )


async def _sse(state: ServerState, handle: Job, mid: str, prompt_tokens: int) -> AsyncIterator[str]:
    # message_start goes out as the job leaves the queue, before the prefill (a long one would look
    # hung); its usage counts the whole prompt as input. How much of it the cache served is known
    # after the prefill: message_delta's usage carries the final split (cache_read_input_tokens ...).
    message: dict[str, Any] = {
        "id": mid, "type": "message", "role": "assistant", "model": state.model_id, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": _usage(None, Usage(0, 0, prompt_tokens), 0),
    }  # fmt: skip
    try:
        yield event("message_start", {"message": message})
        yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
        yield event("ping", {})
        async for ev in events(handle):
            if ev.kind == "delta":
                yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": ev.data}})
            elif ev.kind == "done":
                out: Outcome = ev.data
                record(state, out)
                yield event("content_block_stop", {"index": 0})
                delta = {"stop_reason": _stop_reason(out), "stop_sequence": out.generation.stop_sequence}
                usage = _usage(out, out.usage, out.generation.completion_tokens)
                yield event("message_delta", {"delta": delta, "usage": usage, "ctxcache": out.extension()})
                yield event("message_stop", {})
            elif ev.kind == "error":
                yield event("error", error_body("/v1/messages", ev.data[0], ev.data[1]))
    finally:
        handle.cancel()
