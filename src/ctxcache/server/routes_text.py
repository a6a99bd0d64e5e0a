"""Text endpoints: POST /v1/completions (OpenAI's legacy API, which llama.cpp, vLLM and lm-eval
still call), POST /v1/messages/count_tokens (Anthropic), and vLLM-style /tokenize and /detokenize.

A completion prompt is raw text (tokenized with the model's BOS, as vLLM does) or a list of token
ids; it goes through the same cache as chat, so ``usage.prompt_tokens_details.cached_tokens``
reports the reused prefix.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from ..integrations import SamplingParams
from .deps import APIError, check_cache_salt, tenant_for
from .jobs import ChatJob, Outcome, ServerState, collect, events, record, start
from .routes_anthropic import to_messages as anthropic_messages
from .routes_openai import _usage, check_stops
from .schemas import (
    Completion,
    CompletionRequest,
    CountTokensRequest,
    DetokenizeRequest,
    TokenizeChat,
    TokenizePrompt,
)
from .sse import data_line, with_keepalive
from .worker import Job

router = APIRouter(tags=["OpenAI"])
tools = APIRouter(tags=["tokens"])
DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions
_BAD: dict[int | str, dict[str, Any]] = {
    400: {"description": "invalid request (the message names the field)"},
    401: {"description": "missing or invalid API key"},
}
_COUNT = {**_BAD, 404: {"description": "unknown model"}}
_STREAM = {
    **_COUNT,
    200: {"content": {"text/event-stream": {"schema": {"description": "text_completion chunks, then [DONE]"}}}},
    429: {"description": "queue full; see Retry-After"},
}


def encode_text(lm: Any, text: str, add_special_tokens: bool = True) -> list[int]:
    return list(lm.tokenizer(text, add_special_tokens=add_special_tokens).input_ids)


def check_ids(lm: Any, ids: list[int], field: str) -> list[int]:
    vocab = int(lm.vocab_size)
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise APIError(400, f"{field}: token id {bad} is outside this model's vocabulary (0..{vocab - 1})", param=field)
    return ids


@router.post("/v1/completions", response_model=Completion, responses=_STREAM)
async def completions(
    body: CompletionRequest, request: Request, tenant: str = Depends(tenant_for)
) -> Completion | StreamingResponse:
    """Complete a raw prompt (a string or a list of token ids); ``stream: true`` for server-sent events."""
    state: ServerState = request.app.state.ctx
    state.check_model(body.model)
    if body.max_tokens is not None:
        state.check_max_tokens(body.max_tokens, "max_tokens")
    stops = check_stops(body.stop)
    prompt = body.prompt
    if isinstance(prompt, list):
        if not prompt:
            raise APIError(400, "prompt: an empty token list", param="prompt")
        ids = check_ids(state.lm, list(prompt), "prompt")
        encode, size = (lambda: ids), len(ids)
    else:
        text = prompt
        encode, size = (lambda: encode_text(state.lm, text)), len(text)
    clamp = body.max_tokens is None
    params = SamplingParams(
        body.max_tokens or DEFAULT_COMPLETION_TOKENS, body.temperature, body.top_p, stops, body.seed
    )
    arrived = getattr(request.state, "arrived", time.perf_counter())
    salt = check_cache_salt(state, tenant, body.cache_salt)
    req_id = getattr(request.state, "request_id", None)
    job = ChatJob([], params, tenant, arrived, clamp_max_tokens=clamp, cache_salt=salt, request_id=req_id)
    job.encode, job.size = encode, size
    rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        handle = await start(state, job)
        return StreamingResponse(
            with_keepalive(_sse(state, handle, rid, created, include_usage), state.cfg.keepalive_s, comment=True),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    handle = await start(state, job)
    text_out, out = await collect(state, handle)
    return Completion.model_validate(
        {
            "id": rid,
            "created": created,
            "model": state.model_id,
            "choices": [{"text": text_out, "finish_reason": _finish(out)}],
            "usage": _usage(out),
            "ctxcache": out.extension(),
        }
    )


def _finish(out: Outcome) -> str:
    return "length" if out.generation.finish_reason == "length" else "stop"


async def _sse(state: ServerState, handle: Job, rid: str, created: int, include_usage: bool) -> AsyncIterator[str]:
    def chunk(text: str, finish: str | None = None, **extra: Any) -> str:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        return data_line({"id": rid, "object": "text_completion", "created": created, "model": state.model_id,
                          "choices": [choice], **extra})  # fmt: skip

    try:
        async for ev in events(handle):
            if ev.kind == "delta":
                yield chunk(ev.data)
            elif ev.kind == "done":
                out: Outcome = ev.data
                record(state, out)
                yield chunk("", _finish(out), ctxcache=out.extension())
                if include_usage:
                    yield data_line({"id": rid, "object": "text_completion", "created": created,
                                     "model": state.model_id, "choices": [], "usage": _usage(out)})  # fmt: skip
            elif ev.kind == "error":
                from .deps import error_body

                yield data_line(error_body("/v1/completions", ev.data[0], ev.data[1]))
        yield "data: [DONE]\n\n"
    finally:
        handle.cancel()


@router.post("/v1/messages/count_tokens", tags=["Anthropic"], responses=_COUNT)
async def count_tokens(body: CountTokensRequest, request: Request, tenant: str = Depends(tenant_for)) -> dict[str, int]:
    """The prompt's token count: what ``usage`` then reports as input + cache read + cache creation."""
    import asyncio

    state: ServerState = request.app.state.ctx
    state.check_model(body.model)
    msgs, _ = anthropic_messages(body)  # type: ignore[arg-type]
    ids = await asyncio.get_running_loop().run_in_executor(state.tokenizer, state.lm.encode, msgs)
    return {"input_tokens": len(ids)}


@tools.post("/tokenize", responses=_BAD)
async def tokenize(
    body: TokenizePrompt | TokenizeChat, request: Request, tenant: str = Depends(tenant_for)
) -> dict[str, Any]:
    """Token ids of a prompt string, or of chat ``messages`` rendered with the chat template (as vLLM)."""
    import asyncio

    state: ServerState = request.app.state.ctx
    loop = asyncio.get_running_loop()
    if isinstance(body, TokenizeChat):
        msgs = [{"role": "system" if m.role == "developer" else m.role,
                 "content": m.content if isinstance(m.content, str) else "\n".join(p.text for p in m.content)}
                for m in body.messages]  # fmt: skip
        gen = body.add_generation_prompt
        ids = await loop.run_in_executor(state.tokenizer, lambda: state.lm.encode(msgs, add_generation_prompt=gen))
    else:
        prompt, special = body.prompt, body.add_special_tokens
        ids = await loop.run_in_executor(state.tokenizer, encode_text, state.lm, prompt, special)
    return {"count": len(ids), "max_model_len": state.max_context, "tokens": ids}


@tools.post("/detokenize", responses=_BAD)
async def detokenize(body: DetokenizeRequest, request: Request, tenant: str = Depends(tenant_for)) -> dict[str, str]:
    """The text of a list of token ids."""
    state: ServerState = request.app.state.ctx
    ids = check_ids(state.lm, list(body.tokens), "tokens")
    return {"prompt": state.lm.tokenizer.decode(ids)}
