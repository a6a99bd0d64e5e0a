"""RequestGuard reads and drops the rest of a refused body before its 413 goes out.

Closing a connection with request bytes still unread makes the kernel send a reset, and a reset
that overtakes the 413 leaves the client with "peer closed connection without sending complete
message body" (seen in tests/server/test_hostile.py's 10 MB post, ~2-4 % of tries on a loaded
machine). These drive the ASGI middleware directly, so the order of reads and sends is exact.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ctxcache.server import guards
from ctxcache.server.guards import RequestGuard

LIMIT = 4096


class Wire:
    """An ASGI receive/send pair that records the order of events."""

    def __init__(self, chunks: list[bytes], hang: bool = False) -> None:
        self.chunks, self.hang = list(chunks), hang
        self.events: list[str] = []
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if not self.chunks:
            if self.hang:
                await asyncio.sleep(3600)
            return {"type": "http.disconnect"}
        body = self.chunks.pop(0)
        self.events.append(f"read {len(body)}")
        return {"type": "http.request", "body": body, "more_body": bool(self.chunks) or self.hang}

    async def send(self, msg: dict[str, Any]) -> None:
        self.events.append(msg["type"])
        self.sent.append(msg)


async def reading_app(scope: Any, receive: Any, send: Any) -> None:
    """A route that reads its whole body (the streaming path: no Content-Length)."""
    while True:
        msg = await receive()
        if not msg.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def scope(headers: dict[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": list(headers.items())}


def run(wire: Wire, headers: dict[bytes, bytes]) -> int:
    asyncio.run(RequestGuard(reading_app, LIMIT)(scope(headers), wire.receive, wire.send))
    return wire.sent[0]["status"]


def test_a_declared_oversized_body_is_read_to_its_end_before_the_413():
    wire = Wire([b"x" * 1000] * 10)
    assert run(wire, {b"content-length": b"10000"}) == 413
    first_send = wire.events.index("http.response.start")
    assert wire.events[:first_send] == ["read 1000"] * 10  # all of it, then the answer
    body = json.loads(wire.sent[1]["body"])
    assert body["error"]["type"] == "invalid_request_error" and str(LIMIT) in body["error"]["message"]


def test_a_streamed_body_past_the_limit_is_read_to_its_end_before_the_413():
    wire = Wire([b"x" * 1000] * 10)
    assert run(wire, {}) == 413
    assert wire.events.index("http.response.start") == 10 and not wire.chunks


def test_a_client_waiting_for_100_continue_is_answered_without_reading():
    wire = Wire([b"x" * 1000] * 10)
    assert run(wire, {b"content-length": b"10000", b"expect": b"100-continue"}) == 413
    assert wire.events[0] == "http.response.start" and len(wire.chunks) == 10


def test_the_drain_stops_at_its_byte_bound(monkeypatch):
    monkeypatch.setattr(guards, "DRAIN_BYTES", 5000)
    wire = Wire([b"x" * 1000] * 20)
    assert run(wire, {b"content-length": b"20000"}) == 413
    assert wire.events.count("read 1000") == 6 and len(wire.chunks) == 14  # past 5,000 bytes: answer


@pytest.mark.parametrize("headers", [{b"content-length": b"999999"}, {}], ids=["declared", "streamed"])
def test_the_drain_stops_at_its_time_bound_when_the_client_stalls(monkeypatch, headers):
    monkeypatch.setattr(guards, "DRAIN_SECONDS", 0.05)
    wire = Wire([b"x" * 5000], hang=True)  # sends over the limit, then nothing more
    assert run(wire, headers) == 413


def test_the_byte_bound_counts_what_the_drain_reads_not_what_came_before(monkeypatch):
    """A limit above the drain bound (max_body_bytes is configurable) still drains."""
    monkeypatch.setattr(guards, "DRAIN_BYTES", 2000)
    wire = Wire([b"x" * 1000] * 10)
    assert run(wire, {}) == 413  # over LIMIT after 5 reads, then 3 more: past 2,000 drained bytes
    assert wire.events.index("http.response.start") == 8
