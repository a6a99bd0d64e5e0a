"""The outermost checks on every HTTP request, before routing or JSON parsing.

- A request id (the client's ``x-request-id`` if it is a short token, else a new one) is put in
  ``scope["state"]`` and echoed in the response headers, so a client's report can be found in the log.
- A body over ``max_body_bytes`` is refused with 413 as it arrives (by Content-Length, or while
  it streams in), before anything parses or tokenizes it. The rest of a refused body is read and
  dropped (up to ``DRAIN_BYTES`` / ``DRAIN_SECONDS``) before the 413 goes out: closing a socket
  with unread data makes the kernel reset the connection, and a reset that overtakes the 413
  leaves the client with "peer closed connection" instead of the answer (an HTTP server's
  lingering close).
- A trailing slash is dropped (``/v1/chat/completions/`` is the route without it): a redirect of a
  POST is an empty 307 to most clients.
- An exception that escapes the app becomes a 500 in the API's own shape that says only
  "internal error" and the request id; the traceback goes to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import uuid
from typing import Any

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .deps import error_body, internal_message

log = logging.getLogger("ctxcache.server")
_GOOD_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
DRAIN_BYTES = 64 << 20  # past this much more of a refused body, close anyway (the client may see a reset)
DRAIN_SECONDS = 2.0


async def _drain(receive: Receive) -> None:
    """Read and drop the rest of a refused request body, within the bounds above."""

    async def read_rest() -> None:
        seen = 0
        while seen <= DRAIN_BYTES:
            msg = await receive()
            if msg["type"] != "http.request":
                return
            seen += len(msg.get("body", b""))
            if not msg.get("more_body", False):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(read_rest(), DRAIN_SECONDS)


class _TooLarge(HTTPException):
    """Raised from ``receive``: an HTTPException, so FastAPI's body reader lets it through as a 413."""


class RequestGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        rid = given if _GOOD_ID.fullmatch(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        path = scope.get("path", "")
        if len(path) > 1 and path.endswith("/"):
            path = path.rstrip("/") or "/"
            scope = {**scope, "path": path, "raw_path": path.encode()}
        started = False

        async def send_with_id(msg: Message) -> None:
            nonlocal started
            if msg["type"] == "http.response.start":
                started = True
                msg = {**msg, "headers": [*msg.get("headers", []), (b"x-request-id", rid.encode())]}
            await send(msg)

        declared = self._declared_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            # A client waiting for "100 Continue" has sent nothing: reading would invite the body.
            if headers.get(b"expect", b"").lower() != b"100-continue":
                await _drain(receive)
            await self._too_large(scope, send_with_id)
            return
        try:
            await self.app(scope, self._limited(receive), send_with_id)
        except _TooLarge:  # read outside a route (a route's own read becomes a shaped 413 there)
            if not started:
                await self._too_large(scope, send_with_id)
        except Exception:
            log.exception("request %s (%s %s) failed", rid, scope.get("method"), path)
            if not started:
                await _send_json(send_with_id, 500, error_body(path, 500, internal_message(rid)))

    @staticmethod
    def _declared_length(scope: Scope) -> int | None:
        for name, value in scope.get("headers") or ():
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return None
        return None

    def _limited(self, receive: Receive) -> Receive:
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_body_bytes:
                    if msg.get("more_body", False):
                        await _drain(receive)
                    raise _TooLarge(413, self._message())
            return msg

        return limited

    def _message(self) -> str:
        return f"the request body is larger than this server's limit of {self.max_body_bytes} bytes (max_body_bytes)"

    async def _too_large(self, scope: Scope, send: Send) -> None:
        await _send_json(send, 413, error_body(scope.get("path", ""), 413, self._message()), close=True)


async def _send_json(send: Send, status: int, body: Any, *, close: bool = False) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    if close:  # the rest of the body is never read: the connection cannot be reused
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
