"""The router's keep-alive client to its workers (router/upstream.py), against scripted HTTP/1.1
servers on loopback: connection reuse, a pooled connection the worker closed, framing, errors."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from ctxcache.router.upstream import ConnectFailed, Upstream, UpstreamError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def read_request(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    n = next(int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length"))
    return head + await r.readexactly(n)


@contextlib.asynccontextmanager
async def server(handler):
    """``handler(conn_no, request_no, request, writer)`` writes the answers (or closes)."""
    conns = [0]
    seen: list[bytes] = []

    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conns[0] += 1
        me = conns[0]
        try:
            for i in range(100):
                req = await read_request(r)
                seen.append(req)
                if await handler(me, i, req, w) is False:
                    break
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        w.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", conns, seen
    finally:
        srv.close()


OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_connections_are_kept_alive_and_the_body_is_sent_as_given():
    async def go():
        async def h(conn, i, req, w):
            w.write(OK)

        async with server(h) as (url, conns, seen):
            up = Upstream()
            for n in range(3):
                resp = await up.request(
                    "POST", f"{url}/v1/chat/completions?x=1", b'{"a": %d}' % n, [("x-api-key", "k")], 5
                )
                assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
                assert await resp.aread() == b"{}"
            await up.aclose()
            assert conns[0] == 1 and up.opened == 1
            assert seen[2].startswith(b"POST /v1/chat/completions?x=1 HTTP/1.1\r\n")
            assert b"x-api-key: k\r\n" in seen[2] and seen[2].endswith(b'\r\n\r\n{"a": 2}')

    run(go())


def test_a_pooled_connection_the_worker_closed_is_replaced_and_the_request_sent_again():
    async def go():
        async def h(conn, i, req, w):
            if i == 1:  # the worker dropped the idle connection just as the next request came
                return False
            w.write(OK)

        async with server(h) as (url, conns, seen):
            up = Upstream()
            assert (await (await up.request("POST", url + "/a", b"1", [], 5)).aread()) == b"{}"
            resp = await up.request("POST", url + "/b", b"2", [], 5)
            assert resp.status_code == 200 and await resp.aread() == b"{}"
            assert conns[0] == 2 and len(seen) == 3  # the second request went twice: once unanswered

    run(go())


def test_a_new_connection_closed_without_an_answer_is_an_error_not_a_loop():
    async def go():
        async def h(conn, i, req, w):
            return False

        async with server(h) as (url, conns, _):
            with pytest.raises(UpstreamError) as e:
                await Upstream().request("POST", url + "/x", b"", [], 5)
            assert not isinstance(e.value, ConnectFailed) and conns[0] == 1

    run(go())


def test_a_refused_connection_is_connect_failed():
    with pytest.raises(ConnectFailed):
        run(Upstream().request("GET", f"http://127.0.0.1:{free_port()}/", b"", [], 5))


def test_chunked_bodies_pass_through_piece_by_piece_and_keep_the_connection():
    async def go():
        async def h(conn, i, req, w):
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            for ev in (b"data: 1\n\n", b"data: 2\n\n"):
                w.write(b"%x\r\n%s\r\n" % (len(ev), ev))
                await w.drain()
                await asyncio.sleep(0.05)
            w.write(b"0\r\n\r\n")

        async with server(h) as (url, conns, _):
            up = Upstream()
            for _ in range(2):
                resp = await up.request("POST", url + "/s", b"{}", [], 5)
                assert [p async for p in resp.aiter_raw()] == [b"data: 1\n\n", b"data: 2\n\n"]
            assert conns[0] == 1

    run(go())


def test_a_short_body_and_a_slow_worker_are_errors():
    async def go():
        async def short(conn, i, req, w):
            w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12345")
            return False

        async with server(short) as (url, _, _):
            resp = await Upstream().request("GET", url + "/", b"", [], 5)
            with pytest.raises(UpstreamError):
                await resp.aread()

        async def slow(conn, i, req, w):
            await asyncio.sleep(2)

        async with server(slow) as (url, _, _):
            with pytest.raises(UpstreamError, match="Timeout"):
                await Upstream().request("GET", url + "/", b"", [], 0.2)

    run(go())


def test_connection_close_and_unframed_bodies_are_not_reused():
    async def go():
        async def h(conn, i, req, w):
            w.write(b"HTTP/1.1 200 OK\r\n\r\nto the end")
            return False

        async with server(h) as (url, conns, _):
            up = Upstream()
            for _ in range(2):
                resp = await up.request("GET", url + "/", b"", [], 5)
                assert await resp.aread() == b"to the end"
            assert conns[0] == 2 and up.opened == 2

    run(go())
