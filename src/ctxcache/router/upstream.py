"""The router's HTTP/1.1 client to its workers: keep-alive connections pooled per worker, the
request body written as received, the response body passed on as it arrives.

Why not httpx, which the router used first: on the request path it cost ~0.5 ms of event-loop
CPU per request on an idle core (httpcore's pool, h11's state machine, anyio's streams:
benchmarks/fleet/profile_router.py, docs/routing.md "Router overhead"), a quarter of the 2 ms
budget. A worker is an HTTP/1.1 server the router was pointed at, so one request per connection
turn is all it needs: no HTTP/2, no redirects, no cookies, no proxies, no decompression (the
body and its content-encoding pass through together). httpx stays for the health checks.

A pooled connection the worker has closed meanwhile (uvicorn drops idle ones after 5 s) fails
on its first read with nothing received; that request is sent once more on a new connection,
as httpcore does, since the worker never saw it. Errors are UpstreamError (ConnectFailed when
no connection could be made: the pool ejects the worker at once).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterable
from urllib.parse import urlsplit

_MAX_HEAD = 64 * 1024
_NO_BODY = {204, 304}


class UpstreamError(Exception):
    """The worker could not be reached, broke the connection or did not answer in time."""


class ConnectFailed(UpstreamError):
    """No connection could be made (refused, unresolvable, or not made in time)."""


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    def usable(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing() or self.reader._buffer)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.writer.close()


class Response:
    """One response: status and headers read, the body read on demand (aread or aiter_raw)."""

    def __init__(self, client: Upstream, key: str, conn: _Conn, status: int, headers: list[tuple[str, str]],
                 reusable: bool, read_timeout: float, method: str) -> None:  # fmt: skip
        self._client, self._key, self._conn = client, key, conn
        self.status_code, self.header_list, self._timeout = status, headers, read_timeout
        self.headers = {k: v for k, v in headers}  # lower-case names; the last of a repeated one
        te = self.headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        cl = self.headers.get("content-length")
        self._left = -1 if self._chunked or cl is None else int(cl)
        if method == "HEAD" or status in _NO_BODY or 100 <= status < 200:
            self._left, self._chunked = 0, False
        self._reusable = reusable and (self._chunked or self._left >= 0)
        self._done = False

    async def _read(self, op: asyncio.Future[bytes] | asyncio.Task[bytes] | object) -> bytes:
        try:
            async with asyncio.timeout(self._timeout):
                return await op  # type: ignore[misc,no-any-return]
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body as it arrives (chunked framing removed), each piece as the socket gave it."""
        r = self._conn.reader
        if self._chunked:
            while True:
                size_line = await self._read(r.readuntil(b"\r\n"))
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (await self._read(r.readuntil(b"\r\n"))) != b"\r\n":  # trailers
                        pass
                    break
                while size:
                    piece = await self._read(r.read(size))
                    if not piece:
                        raise UpstreamError("the worker closed the connection mid-chunk")
                    size -= len(piece)
                    yield piece
                await self._read(r.readexactly(2))
        elif self._left >= 0:
            while self._left:
                piece = await self._read(r.read(min(self._left, 1 << 20)))
                if not piece:
                    raise UpstreamError("the worker closed the connection before the whole body")
                self._left -= len(piece)
                yield piece
        else:  # no length: the body runs to the end of the connection
            while piece := await self._read(r.read(1 << 20)):
                yield piece
        self._done = True
        await self.aclose()

    async def aread(self) -> bytes:
        if not self._chunked and self._left >= 0:
            body = await self._read(self._conn.reader.readexactly(self._left)) if self._left else b""
            self._left, self._done = 0, True
            await self.aclose()
            return body
        return b"".join([piece async for piece in self.aiter_raw()])

    async def aclose(self) -> None:
        """Give the connection back to the pool if the whole body was read, else close it."""
        conn, self._conn = self._conn, None  # type: ignore[assignment]
        if conn is None:
            return
        if self._done and self._reusable:
            self._client._release(self._key, conn)
        else:
            conn.close()


class Upstream:
    """Keep-alive HTTP/1.1 connections to the workers, at most ``max_idle`` idle per worker."""

    def __init__(self, *, connect_timeout_s: float = 2.0, max_idle: int = 64) -> None:
        self.connect_timeout_s, self.max_idle = connect_timeout_s, max_idle
        self._idle: dict[str, deque[_Conn]] = {}
        self._ssl: ssl.SSLContext | None = None
        self.opened = 0  # connections made: for tests and the profile

    async def _connect(self, scheme: str, host: str, port: int) -> _Conn:
        tls = None
        if scheme == "https":
            tls = self._ssl = self._ssl or ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(host, port, ssl=tls, limit=_MAX_HEAD)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
        self.opened += 1
        return _Conn(reader, writer)

    def _release(self, key: str, conn: _Conn) -> None:
        idle = self._idle.setdefault(key, deque())
        if len(idle) < self.max_idle and conn.usable():
            idle.append(conn)
        else:
            conn.close()

    async def request(self, method: str, url: str, body: bytes, headers: Iterable[tuple[str, str]],
                      read_timeout_s: float) -> Response:  # fmt: skip
        """Send one request; the response once its status line and headers are in."""
        u = urlsplit(url)
        scheme, host = u.scheme, u.hostname or ""
        port = u.port or (443 if scheme == "https" else 80)
        key = f"{scheme}://{host}:{port}"
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        lines = [f"{method} {target} HTTP/1.1", f"host: {u.netloc}", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used: the least likely to have been closed
            if not conn.usable():
                conn.close()
                continue
            try:
                return await self._exchange(key, conn, method, head, body, read_timeout_s)
            except _Stale:
                conn.close()  # the worker had closed it: nothing was received, send it again
        conn = await self._connect(scheme, host, port)
        try:
            return await self._exchange(key, conn, method, head, body, read_timeout_s)
        except _Stale as exc:
            conn.close()
            raise UpstreamError(str(exc.__cause__ or "the worker closed the connection")) from exc

    async def _exchange(self, key: str, conn: _Conn, method: str, head: bytes, body: bytes,
                        read_timeout_s: float) -> Response:  # fmt: skip
        r, w = conn.reader, conn.writer
        try:
            w.writelines((head, body))  # one writev under uvloop: no copy of the body, one syscall
            async with asyncio.timeout(read_timeout_s):
                await w.drain()
                while True:
                    try:
                        raw = await r.readuntil(b"\r\n\r\n")
                    except asyncio.IncompleteReadError as exc:
                        if not exc.partial:
                            raise _Stale("the worker closed the connection") from exc
                        raise
                    status, headers, keep = _parse_head(raw)
                    if status >= 200 or status == 101:
                        break
        except _Stale:
            raise
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError) as exc:
            conn.close()
            if isinstance(exc, ConnectionResetError | BrokenPipeError):
                raise _Stale("the worker reset the connection") from exc
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from exc
        return Response(self, key, conn, status, headers, keep, read_timeout_s, method)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().close()


class _Stale(Exception):
    """A connection that failed before any byte of the response came back."""


def _parse_head(raw: bytes) -> tuple[int, list[tuple[str, str]], bool]:
    lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
    status = int(rest[:3])
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip().lower(), value.strip()))
    conn = next((v.lower() for k, v in headers if k == "connection"), "")
    keep = version == "HTTP/1.1" and "close" not in conn
    return status, headers, keep
