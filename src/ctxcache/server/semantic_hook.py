"""The semantic cache in the request path: a pure ASGI middleware in front of both chat APIs.

For POST /v1/chat/completions and /v1/messages of a tenant that opted in, it reads the body,
builds a SemanticQuery (the last user message is compared by meaning; the system prompt, earlier
turns and every generation parameter must match exactly), and either answers from the cache or
passes the request on and stores a successful reply. The routes themselves are untouched, so
their validation, auth and error shapes stay the only ones: any body the hook cannot read, or a
request it must not serve, goes through unchanged.

A served hit carries ``x-ctxcache-semantic-cache: hit`` and ``x-ctxcache-semantic-similarity``
headers, and ``usage.semantic_cache = {"hit": true, "similarity": ..., "entry_id": ...}`` (token
counts are 0: no model ran). Other replies carry ``x-ctxcache-semantic-cache: miss`` or
``bypass; reason=...``. Bypassed: temperature > 0 (both APIs default to 1), tools, streaming,
non-text content, a last message that is not the user's, ``x-ctxcache-semantic: off``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from anyio import to_thread
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import SemanticInputError
from ..semantic import Probe, SemanticCache, SemanticQuery
from .deps import APIError, error_response, tenant_for

log = logging.getLogger(__name__)
ROUTES = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}
MAX_BODY = 4 << 20  # larger bodies pass through unread
# Body fields that never change the answer; every other field is part of the exact-match key.
_NOT_PARAMS = {"model", "messages", "system", "stream", "stream_options", "user", "metadata", "temperature"}


@dataclass
class Settings:
    tenants: frozenset[str] | None  # None: every tenant
    model_id: str

    def enabled(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants


def _text(content: Any) -> str | None:
    """Plain text of a message's content, or None when it holds anything but text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "\n".join(str(p.get("text", "")) for p in content)
    return None


def build_query(
    api: str, body: dict[str, Any], tenant: str, model: str, headers: dict[str, str]
) -> SemanticQuery | str:
    """The query for a request body, or the reason it bypasses the semantic cache."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
        return "unreadable"
    if body.get("stream"):
        return "stream"
    texts = [_text(m.get("content")) for m in msgs]
    system = _text(body.get("system")) if body.get("system") is not None else ""
    if any(t is None for t in texts) or system is None:
        return "non-text content"
    if msgs[-1].get("role") != "user":
        return "last message is not the user's"
    temperature = body.get("temperature", 1.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        return "unreadable"
    context = json.dumps([system, *[[m.get("role"), t] for m, t in zip(msgs[:-1], texts[:-1])]])
    params = {k: v for k, v in body.items() if k not in _NOT_PARAMS}
    return SemanticQuery(
        tenant=tenant,
        model=model,
        text=str(texts[-1]),
        context=context,
        params={"api": api, **params},
        temperature=float(temperature),
        tools=bool(body.get("tools") or body.get("functions") or body.get("tool_choice")),
        bypass=headers.get("x-ctxcache-semantic", "").strip().lower() in ("off", "bypass", "false", "0"),
    )


def render_hit(api: str, model: str, response: dict[str, Any], similarity: float, entry_id: str) -> dict[str, Any]:
    sem = {"hit": True, "similarity": round(similarity, 6), "entry_id": entry_id}
    text = str(response.get("text", ""))
    if api == "openai":
        return {
            "id": f"chatcmpl-sem-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": response.get("finish", "stop"),
                    "logprobs": None,
                }
            ],  # fmt: skip
            "usage": {
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "total_tokens": 0,
                "prompt_tokens_details": {"cached_tokens": 0},
                "semantic_cache": sem,
            },  # fmt: skip
            "ctxcache": {"semantic_cache": sem},
        }
    return {
        "id": f"msg_sem_{uuid.uuid4().hex}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": response.get("finish", "end_turn"),
        "stop_sequence": response.get("stop_sequence"),
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "semantic_cache": sem,
        },  # fmt: skip
        "ctxcache": {"semantic_cache": sem},
    }


def extract_reply(api: str, payload: Any) -> dict[str, Any] | None:
    """What to cache from a successful reply: text and finish reason (None if it has no text)."""
    try:
        if api == "openai":
            choice = payload["choices"][0]
            return {"text": str(choice["message"]["content"]), "finish": str(choice["finish_reason"])}
        text = "".join(b["text"] for b in payload["content"] if b.get("type") == "text")
        return {"text": text, "finish": payload.get("stop_reason"), "stop_sequence": payload.get("stop_sequence")}
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


async def _read(receive: Receive) -> tuple[bytes, list[Message], bool]:
    """The body (up to MAX_BODY), the messages read, and whether the body was complete."""
    chunks: list[Message] = []
    size = 0
    while True:
        msg = await receive()
        chunks.append(msg)
        if msg["type"] != "http.request":
            return b"", chunks, False
        size += len(msg.get("body", b""))
        if not msg.get("more_body", False):
            return b"".join(m.get("body", b"") for m in chunks), chunks, True
        if size > MAX_BODY:
            return b"", chunks, False


def _replay(chunks: list[Message], receive: Receive) -> Receive:
    pending = list(chunks)

    async def again() -> Message:
        return pending.pop(0) if pending else await receive()

    return again


def _with_header(send: Send, value: str) -> Callable[[Message], Awaitable[None]]:
    async def tagged(msg: Message) -> None:
        if msg["type"] == "http.response.start":
            msg = {**msg, "headers": [*msg.get("headers", []), (b"x-ctxcache-semantic-cache", value.encode())]}
        await send(msg)

    return tagged


class SemanticMiddleware:
    def __init__(self, app: ASGIApp, cache: SemanticCache, settings: Settings) -> None:
        self.app, self.cache, self.settings = app, cache, settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api = ROUTES.get(scope.get("path", "")) if scope["type"] == "http" and scope.get("method") == "POST" else None
        if api is None:
            await self.app(scope, receive, send)
            return
        body, chunks, complete = await _read(receive)
        replay = _replay(chunks, receive)
        request = Request(scope, replay)
        tenant, data = "", None
        try:
            tenant = tenant_for(request)
            data = json.loads(body) if complete else None
        except (APIError, ValueError):  # the route answers bad keys and bad JSON in its own shape
            data = None
        if not isinstance(data, dict) or not self.settings.enabled(tenant):
            await self.app(scope, replay, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        try:
            threshold = _threshold(headers)
        except SemanticInputError as exc:
            await error_response(request, 400, str(exc), param="x-ctxcache-semantic-threshold")(scope, replay, send)
            return
        query = build_query(api, data, tenant, self.settings.model_id, headers)
        if isinstance(query, str):
            await self.app(scope, replay, _with_header(send, f"bypass; reason={query}"))
            return
        try:
            found = await to_thread.run_sync(lambda: self.cache.lookup(query, threshold=threshold))
        except SemanticInputError as exc:  # empty or huge text: the model route decides, uncached
            reason = "empty text" if "empty" in str(exc) else "text too long" if "limit" in str(exc) else "invalid"
            await self.app(scope, replay, _with_header(send, f"bypass; reason={reason}"))
            return
        except Exception:  # the semantic cache must never break serving: answer from the model
            log.exception("semantic cache lookup failed; serving uncached")
            await self.app(scope, replay, _with_header(send, "bypass; reason=error"))
            return
        if found.bypass is not None:
            await self.app(scope, replay, _with_header(send, f"bypass; reason={found.bypass}"))
        elif found.hit is not None:
            await self._serve(api, found.hit.response, found.similarity, found.hit.id.hex(), scope, replay, send)
        else:
            assert found.probe is not None
            await self._pass_and_store(api, found.probe, scope, replay, send)

    async def _serve(
        self, api: str, response: Any, sim: float, eid: str, scope: Scope, rcv: Receive, send: Send
    ) -> None:
        body = json.dumps(render_hit(api, self.settings.model_id, response, sim, eid)).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"x-ctxcache-semantic-cache", b"hit"), (b"x-ctxcache-semantic-similarity", f"{sim:.6f}".encode()),
            (b"x-ctxcache-semantic-entry", eid.encode())]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    async def _pass_and_store(self, api: str, probe: Probe, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on; store a successful reply before its last body chunk goes out, so a
        client that repeats the question right after the answer arrives already hits."""
        status, parts = 0, []

        async def capture(msg: Message) -> None:
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
                msg = {**msg, "headers": [*msg.get("headers", []), (b"x-ctxcache-semantic-cache", b"miss")]}
            elif msg["type"] == "http.response.body" and status == 200:
                parts.append(msg.get("body", b""))
                if not msg.get("more_body", False):
                    await self._store(api, probe, b"".join(parts))
            await send(msg)

        await self.app(scope, receive, capture)

    async def _store(self, api: str, probe: Probe, body: bytes) -> None:
        try:
            reply = extract_reply(api, json.loads(body))
        except ValueError:
            return
        if reply is not None:
            try:
                await to_thread.run_sync(lambda: self.cache.store(probe, reply))
            except Exception:  # the client still gets its reply; a failed store only costs a future hit
                log.exception("semantic cache store failed")


def _threshold(headers: dict[str, str]) -> float | None:
    raw = headers.get("x-ctxcache-semantic-threshold")
    if raw is None:
        return None
    try:
        t = float(raw)
    except ValueError:
        t = -1.0
    if not 0.0 <= t <= 1.0:
        raise SemanticInputError(f"x-ctxcache-semantic-threshold must be a number in [0, 1], got {raw!r}")
    return t
