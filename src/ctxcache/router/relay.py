"""The router's side of the wire to its clients, in plain ASGI: the request body, a whole answer,
an error in each API's shape, a worker's stream relayed one whole SSE event at a time.

Plain ASGI rather than Starlette's Request and Response classes: the chat endpoints are the
router's hot path, and FastAPI's routing, request object, response classes and middleware layers
cost more CPU per request than the rest of the proxying (docs/routing.md, "Router overhead").
What Starlette did for these responses is kept: a content-length on whole bodies (none on 1xx,
204, 304), ``application/json`` errors rendered as JSONResponse renders them, and a stream
cancelled when its client disconnects (StreamingResponse's listener, for uvicorn's ASGI 2.3).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ..server.deps import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

_JSON = (b"content-type", b"application/json")


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body; None when the client went away before sending it."""
    msg = await receive()
    if msg["type"] != "http.request":
        return None
    body: bytes = msg.get("body", b"")
    if not msg.get("more_body"):
        return body  # one message, as uvicorn hands over a body that came in one read: no copy
    parts = [body]
    while msg.get("more_body"):
        msg = await receive()
        if msg["type"] != "http.request":
            return None
        parts.append(msg.get("body", b""))
    return b"".join(parts)


async def reply(send: Send, status: int, headers: Headers, body: bytes) -> None:
    if not (status < 200 or status in (204, 304)):
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def reply_error(send: Send, path: str, status: int, message: str) -> None:
    """``error_body`` as FastAPI's JSONResponse would send it (the same bytes and headers)."""
    body = render(error_body(path, status, message))
    headers = [(b"content-length", str(len(body)).encode()), _JSON]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def render(content: Any) -> bytes:
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


def error_event(api: str, path: str, message: str) -> bytes:
    """The event that ends a stream that broke after its first byte, in the API's own shape."""
    body = json.dumps(error_body(path, 502, message))
    if api == "anthropic":
        return f"event: error\ndata: {body}\n\n".encode()
    return f"data: {body}\n\ndata: [DONE]\n\n".encode()


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class DisconnectWatch:
    """Cancels the task that streams a response when its client disconnects, so the worker's
    connection is closed and it stops generating (Starlette's StreamingResponse does this with a
    task group under uvicorn, whose ``send`` to a gone client returns without error). ``close``
    before the last send: once the response is complete ``receive`` answers a disconnect too."""

    def __init__(self, receive: Receive) -> None:
        self.gone = self._closed = False
        self._task = asyncio.current_task()
        self._watch = asyncio.ensure_future(_until_disconnect(receive))
        self._watch.add_done_callback(self._done)

    def _done(self, t: asyncio.Future[None]) -> None:
        # _closed: the callback may already be scheduled when close() runs
        if not self._closed and not t.cancelled() and t.exception() is None and self._task is not None:
            self.gone = True
            self._task.cancel()

    def close(self) -> None:
        self._closed = True
        self._watch.remove_done_callback(self._done)
        self._watch.cancel()

    def swallow(self) -> bool:
        """In an ``except CancelledError``: True (and the cancel undone) when it was this watch's."""
        if self.gone and self._task is not None:
            self._task.uncancel()
            return True
        return False


def reported_cached(payload: Any) -> int | None:
    """Cached prompt tokens in a response body or stream event (either API), if it carries usage."""
    if not isinstance(payload, dict):
        return None
    for holder in (payload, payload.get("message") or {}):
        u = holder.get("usage") if isinstance(holder, dict) else None
        if isinstance(u, dict):
            if "cache_read_input_tokens" in u:
                return int(u["cache_read_input_tokens"])
            details = u.get("prompt_tokens_details")
            if isinstance(details, dict) and "cached_tokens" in details:
                return int(details["cached_tokens"])
    return None


class Seen:
    """What a relayed stream has shown: whether text has started, the cached tokens it reported."""

    def __init__(self) -> None:
        self.text = False
        self.cached: int | None = None

    def update(self, events: bytes) -> bool:
        """True the first time text appears (the worker's prefill is over)."""
        first = False
        if not self.text and (b"content_block_delta" in events or b'"delta": {"content"' in events):
            self.text = first = True
        if b'"usage"' in events:
            for line in events.split(b"\n"):
                if line.startswith(b"data: {") and b'"usage"' in line:
                    try:
                        n = reported_cached(json.loads(line[6:]))
                    except ValueError:
                        continue
                    if n is not None:
                        self.cached = max(n, self.cached or 0)
        return first
