"""The router in front of fake-model workers (real servers on loopback): routing by prefix,
pass-through of both APIs, retries before the first byte, broken streams, health."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import types

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from ctxcache.router.app import create_router_app
from ctxcache.router.pool import Pool
from ctxcache.router.proxy import Router
from ctxcache.router.requests import RequestKeys
from ctxcache.router.score import ScoreConfig, Scorer, Speculative
from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

from ..server.fake import FakeLM, FakeTokenizer, render

MODEL = "fake-model"
SYSTEM = "You are a helpful assistant for the town library. " * 3  # ~150 tokens: many 8-token blocks


class ChatTokenizer(FakeTokenizer):
    """FakeLM's rendering behind the tokenizer interface the router calls."""

    def apply_chat_template(self, msgs, chat_template=None, tokenize=False, add_generation_prompt=True):
        return render(msgs, add_generation_prompt)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_router(urls: list[str], **pool_kw) -> Router:
    cfg = ServerConfig(cache_config={"block_size": 8, "tiers": [{"kind": "memory", "capacity": 1 << 20}]})
    keys = RequestKeys(ChatTokenizer(), "", cfg, "default")
    pool = Pool(urls, check_interval_s=0.2, **pool_kw)
    r = Router(pool, keys, Scorer(ScoreConfig(block_size=8)), history=Speculative(ttl_s=600))
    pool._on_eject = lambda w: r.metrics.ejections.labels(w.url).inc()
    return r


@contextlib.contextmanager
def fleet(n: int = 2, extra: list[str] | None = None, **pool_kw):
    lms = [FakeLM() for _ in range(n)]
    with contextlib.ExitStack() as stack:
        urls = [stack.enter_context(LiveServer(create_app(lm, ServerConfig(), model_id=MODEL))) for lm in lms]
        router = make_router([*(extra or []), *urls], **pool_kw)
        url = stack.enter_context(LiveServer(create_router_app(router)))
        client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
        yield types.SimpleNamespace(client=client, router=router, urls=urls, lms=lms, url=url)


def chat(text: str, **kw) -> dict:
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
    return {"model": MODEL, "messages": msgs, "max_tokens": 4, **kw}


def message(text: str, **kw) -> dict:
    return {"model": MODEL, "system": SYSTEM, "messages": [{"role": "user", "content": text}], "max_tokens": 4, **kw}


def sse_data(text: str) -> list[dict]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def test_a_shared_prefix_follows_the_first_request_and_the_prediction_matches():
    with fleet() as f:
        first = f.client.post("/v1/chat/completions", json=chat("Opening hours?")).json()
        assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        for q in ("Do you lend maps?", "Is there parking?", "Who runs it?"):
            r = f.client.post("/v1/chat/completions", json=chat(q)).json()
            assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= 140
        served = [w.requests for w in f.router.pool.workers.values()]
        assert sorted(served) == [0, 4]  # round-robin would have prefilled the prompt on both
        text = f.client.get("/metrics").text
        predicted = sum(
            float(x.split()[-1])
            for x in text.splitlines()
            if x.startswith("ctxcache_router_predicted_cached_tokens_total")
        )
        reported = sum(
            float(x.split()[-1])
            for x in text.splitlines()
            if x.startswith("ctxcache_router_reported_cached_tokens_total")
        )
        assert predicted == reported > 0


def test_both_apis_stream_through_with_usage():
    with fleet() as f:
        r = f.client.post("/v1/chat/completions", json=chat("Hi", stream=True, stream_options={"include_usage": True}))
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_data(r.text)
        assert (
            "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
            == "Hello from the fake"
        )
        assert events[-1]["usage"]["prompt_tokens"] > 100 and r.text.rstrip().endswith("data: [DONE]")
        a = f.client.post("/v1/messages", json=message("Hi", stream=True))
        names = [line[7:] for line in a.text.splitlines() if line.startswith("event: ")]
        assert names[0] == "message_start" and names[-1] == "message_stop"
        plain = f.client.post("/v1/messages", json=message("Hi again")).json()
        assert plain["usage"]["cache_read_input_tokens"] >= 140  # the stream before stored the prefix


def test_errors_keep_each_apis_shape_and_other_routes_pass_through():
    with fleet() as f:
        bad = f.client.post("/v1/chat/completions", json={"model": MODEL, "messages": []})
        assert (
            bad.status_code == 400 and "error" in bad.json() and bad.json()["error"]["type"] == "invalid_request_error"
        )
        bad = f.client.post("/v1/messages", json={"model": MODEL, "max_tokens": 0, "messages": []})
        assert bad.status_code == 400 and bad.json()["type"] == "error"
        assert f.client.post("/v1/chat/completions", content=b"{not json").status_code == 400
        assert f.client.get("/v1/models").json()["data"][0]["id"] == MODEL
    dead = f"http://127.0.0.1:{free_port()}"
    with fleet(0, extra=[dead]) as f:
        r = f.client.post("/v1/messages", json=message("x"))
        assert r.status_code == 503 and r.json()["type"] == "error"
        r = f.client.post("/v1/chat/completions", json=chat("x"))
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
        assert f.client.get("/readyz").status_code == 503


def test_a_dead_worker_is_retried_elsewhere_before_the_first_byte_and_ejected():
    dead = f"http://127.0.0.1:{free_port()}"
    with fleet(1, extra=[dead], eject_s=60) as f:
        up = f.router.pool.workers[dead]
        assert not up.healthy and up.ejections == 1  # the first check saw it
        up.healthy = True  # as if it had just died, unseen by any check
        f.router.pool.workers[f.urls[0]].load.prefill_tokens = 10**6  # so the dead one is picked first
        for i in range(3):
            r = f.client.post("/v1/chat/completions", json=chat(f"q{i}"))
            assert r.status_code == 200
        assert not up.healthy and up.ejections == 2 and up.requests == 1  # one try, then never again
        assert 'ctxcache_router_retries_total{api="openai"} 1.0' in f.client.get("/metrics").text
        assert 'ctxcache_router_ejections_total{worker="' + dead + '"} 2.0' in f.client.get("/metrics").text


def broken_worker() -> FastAPI:
    """Answers /readyz, then streams one event of each API and drops the connection."""
    app = FastAPI()

    @app.get("/readyz")
    async def ready() -> dict:
        return {}

    async def body(first: str):
        yield first
        await asyncio.sleep(0.05)
        raise RuntimeError("the worker died mid-stream")

    @app.post("/v1/chat/completions")
    async def chat_route() -> StreamingResponse:
        first = 'data: {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": null}]}\n\n'
        return StreamingResponse(body(first), media_type="text/event-stream")

    @app.post("/v1/messages")
    async def msg_route() -> StreamingResponse:
        first = 'event: message_start\ndata: {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 1, "output_tokens": 0}}}\n\n'
        return StreamingResponse(body(first), media_type="text/event-stream")

    return app


def test_a_stream_that_breaks_after_its_first_byte_ends_with_an_error_event_and_is_not_retried():
    with LiveServer(broken_worker()) as bad:
        router = make_router([bad])
        with LiveServer(create_router_app(router)) as url, httpx.Client(base_url=url, timeout=30) as c:
            r = c.post("/v1/chat/completions", json=chat("x", stream=True))
            events = sse_data(r.text)
            assert events[0]["choices"][0]["delta"]["content"] == "Hel"
            assert events[-1]["error"]["type"] == "server_error" and r.text.rstrip().endswith("[DONE]")
            a = c.post("/v1/messages", json=message("x", stream=True))
            assert "event: error" in a.text and sse_data(a.text)[-1]["error"]["type"] == "api_error"
            assert router.pool.workers[bad].requests == 2  # one attempt each: never retried after a byte


def test_ejected_workers_come_back_after_a_passing_check():
    clock = types.SimpleNamespace(t=0.0)
    state = {"ok": False}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200 if state["ok"] else 503)

    pool = Pool(["http://w1"], eject_s=5, fail_threshold=2, clock=lambda: clock.t)
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    w = pool.workers["http://w1"]

    async def run() -> None:
        await pool.check(client, w)
        assert w.healthy and w.failures == 1
        await pool.check(client, w)
        assert not w.healthy and w.ejections == 1
        state["ok"] = True
        clock.t = 3
        await pool.check(client, w)
        assert not w.healthy  # still within its ejection time
        clock.t = 6
        await pool.check(client, w)
        assert w.healthy
        state["ok"] = False  # failing again soon after: twice as long out
        clock.t = 7
        await pool.check(client, w)
        await pool.check(client, w)
        assert not w.healthy and w.eject_for == 10

    asyncio.run(run())


@pytest.mark.parametrize("urls", [[]])
def test_a_pool_needs_workers(urls):
    with pytest.raises(ValueError):
        Pool(urls)
