"""``ctxcache route``: an OpenAI- and Anthropic-compatible proxy that sends each request where
its prefix is cached (docs/routing.md).

Per chat request: parse and tokenize it as the workers do (requests.py), score the healthy
workers (score.py) on the index's prefixes (index.py, fed by KV events) and the router's own
speculative entries and history, send it there. Before the first byte the request may move
once: a connection failure, a timeout, a 5xx or a full queue (429) sends it to the next worker.
After the first byte nothing moves: a broken stream ends with an error event in the API's own
shape. Events pass through as the worker writes them, one whole SSE event at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .feed import RouterEvents
from .index import BlockIndex
from .metrics import RouterMetrics
from .pool import Pool, Upstream
from .relay import DisconnectWatch, Headers, Receive, Scope, Seen, Send, error_event, read_body, reply, reply_error
from .relay import reported_cached as reported_cached
from .requests import Keyed, RequestKeys
from .score import Decision, Scorer, Speculative, prefixes
from .upstream import ConnectFailed, UpstreamError
from .upstream import Response as UpResponse
from .upstream import Upstream as UpClient

_HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer"}
_RETRY_STATUS = {429, 500, 502, 503, 504}


@dataclass
class Router:
    pool: Pool
    keys: RequestKeys | None
    scorer: Scorer
    index: BlockIndex = field(default_factory=BlockIndex)
    spec: Speculative = field(default_factory=Speculative)
    history: Speculative | None = None  # the approximate arm: for workers the events do not cover
    events: RouterEvents | None = None  # --redis: the consumer feeding ``index``
    metrics: RouterMetrics = field(default_factory=RouterMetrics)
    upstream_timeout_s: float = 600.0

    def route(self, keyed: Keyed | None, exclude: set[str]) -> tuple[Upstream, Decision] | None:
        ups = [w for w in self.pool.healthy() if w.url not in exclude]
        if not ups:
            return None
        names = [w.url for w in ups]
        keys, tokens = (keyed.keys, keyed.tokens) if keyed is not None else ([], 0)
        loads = {w.url: w.load for w in ups}
        found = prefixes(keys, names, self.index, self.spec, self.history)
        d = self.scorer.choose(tokens, found, loads, keyed.session if keyed else None)
        return self.pool.workers[d.worker], d

    def sent(self, keyed: Keyed | None, w: Upstream) -> None:
        if keyed is not None and keyed.keys:
            self.spec.add(keyed.keys, w.url)
            if self.history is not None:
                self.history.add(keyed.keys, w.url)


def forward_headers(raw: Headers) -> dict[str, str]:
    """The client's headers to send on (names lower-case, as the ASGI server gives them)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in raw if k.decode("latin-1") not in _HOP}


def _response_headers(resp: UpResponse, w: Upstream, d: Decision | None = None) -> Headers:
    # the body passes through as the worker encoded it, so its content-encoding goes with it
    out: dict[str, str] = {}
    for k, v in resp.header_list:
        if k not in _HOP and k not in ("date", "server"):
            out[k] = f"{out[k]}, {v}" if k in out else v
    out["x-ctxcache-worker"] = w.url  # which worker answered: for logs, tests and clients that care
    if d is not None:  # what the router expected that worker to have cached, and why it went there
        out["x-ctxcache-predicted-cached-tokens"] = str(d.predicted_cached_tokens)
        out["x-ctxcache-route-reason"] = d.reason
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out.items()]


class Proxy:
    """The request path: pick, send, retry once before the first byte, stream through.

    ``serve`` is an ASGI app for one API: app.py calls it for the chat endpoints before FastAPI
    sees them, and from FastAPI's pass-through route for everything else."""

    def __init__(self, router: Router, client: UpClient, tokenizer_threads: int = 2) -> None:
        self.router, self.client = router, client
        self._tok = ThreadPoolExecutor(tokenizer_threads, thread_name_prefix="ctxcache-router-tokenize")

    async def keyed(self, api: str, raw: bytes, headers: dict[str, str]) -> tuple[Keyed | None, Any]:
        try:
            body = json.loads(raw)
        except ValueError:
            return None, None
        keys = self.router.keys
        if keys is None:
            return None, body
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._tok, keys.compute, api, body, headers), body

    async def serve(self, scope: Scope, receive: Receive, send: Send, api: str) -> None:
        t0 = time.perf_counter()
        raw = await read_body(receive)
        if raw is None:
            return  # the client went away before its body was in: no one to answer
        headers = forward_headers(scope["headers"])
        keyed, body = await self.keyed(api, raw, headers) if api != "other" else (None, None)
        stream = isinstance(body, dict) and body.get("stream") is True
        qs = scope.get("query_string", b"")
        path = scope["path"] + (f"?{qs.decode('latin-1')}" if qs else "")
        call = _Call(scope["method"], path, raw, headers, api, stream, keyed, receive, send)
        tried: set[str] = set()
        m = self.router.metrics
        for attempt in range(2):
            picked = self.router.route(keyed, tried)
            if picked is None:
                break
            w, d = picked
            tried.add(w.url)
            if attempt == 0:
                m.overhead.observe(time.perf_counter() - t0)
            m.decisions.labels(d.reason).inc()
            if await self.send(w, d, call):
                return
            m.retries.labels(api).inc()
        await reply_error(send, scope["path"], 503, "no worker could take the request; retry later")

    async def send(self, w: Upstream, d: Decision, c: _Call) -> bool:
        """True once answered; False when the request may go to another worker (nothing was sent)."""
        tokens = c.keyed.tokens if c.keyed is not None else 0
        pending = max(0, tokens - d.predicted_cached_tokens)
        w.load.prefill_tokens += pending
        w.requests += 1
        m = self.router.metrics
        m.in_flight.labels(w.url).inc()
        started = False
        try:
            try:
                resp = await self.client.request(
                    c.method, w.url + c.path, c.raw, c.headers.items(), self.router.upstream_timeout_s
                )
            except UpstreamError as exc:
                self.router.pool.failed(w, f"{type(exc).__name__}: {exc}", connect=isinstance(exc, ConnectFailed))
                m.requests.labels(w.url, c.api, "retried").inc()
                return False
            if resp.status_code in _RETRY_STATUS:
                await resp.aclose()
                if resp.status_code != 429:
                    self.router.pool.failed(w, f"answered {resp.status_code}")
                if len(self.router.pool.healthy()) > 1:
                    m.requests.labels(w.url, c.api, "retried").inc()
                    return False
                await self._plain(w, d, c)
                return True
            self.router.sent(c.keyed, w)
            ctype = resp.headers.get("content-type", "")
            if c.stream and resp.status_code == 200 and ctype.startswith("text/event-stream"):
                try:
                    first = await self._first(resp)
                except UpstreamError as exc:
                    await resp.aclose()
                    self.router.pool.failed(w, f"stream: {type(exc).__name__}")
                    return False
                started = True
                await self._stream(w, resp, first, d, c, pending)
                return True
            try:
                content = await resp.aread()
            except UpstreamError as exc:
                self.router.pool.failed(w, f"body: {type(exc).__name__}")
                return False
            finally:
                await resp.aclose()
            self._account(w, c.api, d, c.keyed, content, resp.status_code)
            await reply(c.send, resp.status_code, _response_headers(resp, w, d), content)
            return True
        finally:
            if not started:
                w.load.prefill_tokens -= pending
                m.in_flight.labels(w.url).dec()

    async def _plain(self, w: Upstream, d: Decision, c: _Call) -> None:
        """The last worker's answer, whatever its status (no one left to retry on)."""
        try:
            resp = await self.client.request(c.method, w.url + c.path, c.raw, c.headers.items(),
                                             self.router.upstream_timeout_s)  # fmt: skip
            content = await resp.aread()
        except UpstreamError as exc:
            self.router.pool.failed(w, f"{type(exc).__name__}: {exc}", connect=isinstance(exc, ConnectFailed))
            path = c.path.split("?", 1)[0]
            return await reply_error(c.send, path, 502, "the last worker failed before answering; retry later")
        self._account(w, c.api, d, c.keyed, content, resp.status_code)
        await reply(c.send, resp.status_code, _response_headers(resp, w, d), content)

    async def _first(self, resp: UpResponse) -> tuple[AsyncIterator[bytes], bytes]:
        it = resp.aiter_raw()
        try:
            first = await anext(it)
        except StopAsyncIteration:
            first = b""
        return it, first

    async def _stream(self, w: Upstream, resp: UpResponse, first: tuple[AsyncIterator[bytes], bytes],
                      d: Decision, c: _Call, pending: int) -> None:  # fmt: skip
        """The worker's stream to the client; cut short when the client disconnects."""
        watch = DisconnectWatch(c.receive)
        try:
            await self._relay(w, resp, first, d, c, pending)
            watch.close()
            await c.send({"type": "http.response.body", "body": b""})
        except asyncio.CancelledError:
            if not watch.swallow():
                raise
        finally:
            watch.close()

    async def _relay(self, w: Upstream, resp: UpResponse, first: tuple[AsyncIterator[bytes], bytes],
                     d: Decision, c: _Call, pending: int) -> None:  # fmt: skip
        """The worker's stream, one whole SSE event at a time (a partial event is never followed
        by the error event that ends a broken stream)."""
        it, chunk = first
        api, send = c.api, c.send
        m, path = self.router.metrics, "/v1/messages" if api == "anthropic" else "/v1/chat/completions"
        buf, seen = b"", Seen()
        w.load.streaming += 1
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _response_headers(resp, w, d)})
            while True:
                if not buf and chunk.endswith(b"\n\n"):  # whole events, as a worker writes them: no copy
                    out, cut = chunk, 0
                else:
                    buf += chunk
                    cut = buf.rfind(b"\n\n")
                    if cut >= 0:
                        out, buf = buf[: cut + 2], buf[cut + 2 :]
                if cut >= 0:
                    if seen.update(out) and pending:  # the first text: its prefill is done
                        w.load.prefill_tokens -= pending
                        pending = 0
                    await send({"type": "http.response.body", "body": out, "more_body": True})
                try:
                    chunk = await anext(it)
                except StopAsyncIteration:
                    break
            if buf:
                await send({"type": "http.response.body", "body": buf, "more_body": True})
            self.router.pool.succeeded(w)
            self._count(w, api, d, c.keyed, seen.cached, "ok")
        except UpstreamError as exc:
            self.router.pool.failed(w, f"stream broke: {type(exc).__name__}")
            m.stream_errors.labels(w.url).inc()
            self._count(w, api, d, c.keyed, None, "stream_error")
            msg = "the worker failed while streaming this response; retry the request"
            await send({"type": "http.response.body", "body": error_event(api, path, msg), "more_body": True})
        finally:
            w.load.prefill_tokens -= pending
            w.load.streaming -= 1
            m.in_flight.labels(w.url).dec()
            await resp.aclose()

    def _account(self, w: Upstream, api: str, d: Decision, keyed: Keyed | None, content: bytes, status: int) -> None:
        cached = None
        if status == 200:
            self.router.pool.succeeded(w)
            with contextlib.suppress(ValueError):
                cached = reported_cached(json.loads(content))
        self._count(w, api, d, keyed, cached, "ok" if status == 200 else str(status))

    def _count(self, w: Upstream, api: str, d: Decision, keyed: Keyed | None, cached: int | None, outcome: str) -> None:
        m = self.router.metrics
        m.requests.labels(w.url, api, outcome).inc()
        if keyed is not None:
            m.prompt_tokens.labels(w.url).inc(keyed.tokens)
            m.predicted.labels(w.url).inc(d.predicted_cached_tokens)
        if cached is not None:
            m.reported.labels(w.url).inc(cached)


@dataclass(slots=True)
class _Call:
    """One client request as the proxy sends it on, and the ASGI channel to answer it on."""

    method: str
    path: str  # with its query
    raw: bytes
    headers: dict[str, str]
    api: str
    stream: bool
    keyed: Keyed | None
    receive: Receive
    send: Send
