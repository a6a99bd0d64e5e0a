"""The proxy as a plain ASGI app (Proxy.serve, router/relay.py), driven with scripted ASGI
channels against scripted workers: the bytes and headers a client gets are what Starlette's
Response classes sent, and a client that disconnects mid-stream cuts the worker's stream."""

from __future__ import annotations

import asyncio
import json

from starlette.responses import JSONResponse

from ctxcache.router.pool import Pool
from ctxcache.router.proxy import Proxy, Router
from ctxcache.router.relay import DisconnectWatch
from ctxcache.router.score import ScoreConfig, Scorer
from ctxcache.router.upstream import Upstream
from ctxcache.server.deps import error_body

from .test_upstream import run, server

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()


def scope(path: str = "/v1/chat/completions", method: str = "POST") -> dict:
    return {"type": "http", "method": method, "path": path, "query_string": b"",
            "headers": [(b"host", b"router"), (b"content-type", b"application/json"), (b"connection", b"keep-alive"),
                        (b"content-length", str(len(BODY)).encode()), (b"x-trace", b"7")]}  # fmt: skip


class Client:
    """One client's ASGI channel: its body in one message, then a disconnect when ``leave`` is set."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.leave = asyncio.Event()
        self._body_given = False

    async def receive(self) -> dict:
        if not self._body_given:
            self._body_given = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        await self.leave.wait()
        return {"type": "http.disconnect"}

    async def send(self, msg: dict) -> None:
        self.sent.append(msg)


def make(urls: list[str]) -> tuple[Router, Proxy]:
    router = Router(Pool(urls), None, Scorer(ScoreConfig(block_size=8)))
    return router, Proxy(router, Upstream())


def test_a_whole_answer_and_its_headers_as_starlettes_response_sent_them():
    async def worker(conn, i, req, w):
        w.write(b"HTTP/1.1 200 OK\r\ndate: x\r\nserver: uvicorn\r\ncontent-type: application/json\r\n"
                b"x-a: 1\r\nx-a: 2\r\ncontent-length: 2\r\n\r\n{}")  # fmt: skip

    async def go() -> None:
        async with server(worker) as (url, _, seen):
            router, proxy = make([url])
            c = Client()
            await proxy.serve(scope(), c.receive, c.send, "openai")
            start, body = c.sent
            assert start["status"] == 200 and body["body"] == b"{}" and not body.get("more_body")
            assert start["headers"] == [
                (b"content-type", b"application/json"), (b"x-a", b"1, 2"), (b"x-ctxcache-worker", url.encode()),
                (b"x-ctxcache-predicted-cached-tokens", b"0"), (b"x-ctxcache-route-reason", b"only"),
                (b"content-length", b"2"),
            ]  # fmt: skip
            head = seen[0].split(b"\r\n\r\n")[0].lower()
            assert b"x-trace: 7" in head and b"connection" not in head and head.count(b"content-length") == 1
            assert seen[0].endswith(BODY)
            await proxy.client.aclose()

    run(go())


def test_no_worker_left_is_a_503_in_the_apis_shape_byte_for_byte():
    async def go() -> None:
        router, proxy = make(["http://127.0.0.1:9"])
        router.pool.workers["http://127.0.0.1:9"].healthy = False
        for path, api in (("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")):
            c = Client()
            await proxy.serve(scope(path), c.receive, c.send, api)
            want = JSONResponse(error_body(path, 503, "no worker could take the request; retry later"), 503)
            assert c.sent[0] == {"type": "http.response.start", "status": 503, "headers": want.raw_headers}
            assert c.sent[1]["body"] == want.body

    run(go())


def test_a_client_that_disconnects_mid_stream_closes_the_workers_stream():
    closed = asyncio.Event()

    async def worker(conn, i, req, w):
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        event = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n'
        try:
            for _ in range(200):  # an event every 50 ms until the router hangs up
                w.write(b"%x\r\n%s\r\n" % (len(event), event))
                await w.drain()
                await asyncio.sleep(0.05)
        except ConnectionError:
            closed.set()
        return False

    async def go() -> None:
        async with server(worker) as (url, _, _seen):
            router, proxy = make([url])
            up = router.pool.workers[url]
            c = Client()
            task = asyncio.create_task(proxy.serve(scope(), c.receive, c.send, "openai"))
            while len(c.sent) < 2:  # the head and the first event
                await asyncio.sleep(0.01)
            assert c.sent[1]["body"].startswith(b"data: ") and up.load.streaming == 1
            c.leave.set()
            await asyncio.wait_for(task, 5)  # returns: the disconnect is not an error
            sent = len(c.sent)
            await asyncio.wait_for(closed.wait(), 5)  # the worker saw the router hang up
            assert up.load.streaming == 0 and up.load.prefill_tokens == 0
            assert router.metrics.in_flight.labels(url)._value.get() == 0
            assert len(c.sent) == sent and all(m.get("more_body") for m in c.sent[1:])  # cut: no end sent
            await proxy.client.aclose()

    run(go())


def test_a_disconnect_seen_just_before_the_watch_closes_cancels_nothing():
    async def gone() -> dict:
        return {"type": "http.disconnect"}

    async def go() -> None:
        watch = DisconnectWatch(gone)
        await asyncio.sleep(0)  # the watcher finishes here: its callback is scheduled, not yet run
        watch.close()  # as _stream does before its last send
        await asyncio.sleep(0)  # the scheduled callback runs now
        await asyncio.sleep(0)
        assert not watch.gone

    run(go())
