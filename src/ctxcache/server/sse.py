"""Server-sent event framing and keep-alives.

A long prefill can leave a stream silent for many seconds; clients and proxies with idle
timeouts then drop it. ``with_keepalive`` sends a ping whenever the stream has been quiet for
``interval_s``: an SSE comment line for OpenAI streams (every SSE parser skips it), an
Anthropic ``ping`` event for /v1/messages (the SDKs expect and skip it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

COMMENT_PING = ": keep-alive\n\n"


def data_line(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps({'type': name, **data})}\n\n"


async def with_keepalive(source: AsyncIterator[str], interval_s: float, *, comment: bool) -> AsyncIterator[str]:
    """``source``'s items, plus a ping after every ``interval_s`` seconds without one."""
    ping = COMMENT_PING if comment else event("ping", {})
    it = aiter(source)
    nxt: asyncio.Task[str] | None = None
    try:
        while True:
            if nxt is None:
                nxt = asyncio.ensure_future(anext(it))
            done, _ = await asyncio.wait({nxt}, timeout=interval_s)
            if not done:
                yield ping
                continue
            try:
                item = nxt.result()
            except StopAsyncIteration:
                return
            nxt = None
            yield item
    finally:
        if nxt is not None and not nxt.done():
            nxt.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await nxt
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()  # runs the source's own finally (it cancels the job)
