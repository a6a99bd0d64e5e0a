"""The HTTP API with a fake model: shapes, validation, auth, queueing, metrics, caching usage."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from .conftest import MODEL, chat, message, serve
from .fake import FakeLM

LONG = "You are a careful assistant. " * 8  # ~230 characters = tokens for the fake


def test_openapi_models_and_health(client):
    spec = client.get("/openapi.json").json()
    assert {"/v1/chat/completions", "/v1/messages", "/v1/models", "/healthz", "/metrics"} <= set(spec["paths"])
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == MODEL
    assert models["data"][0]["type"] == "model" and "created_at" in models["data"][0]
    h = client.get("/healthz").json()
    assert h["status"] == "ok" and h["model"] == MODEL and h["queue_depth"] == 0
    assert set(h["cache"]["tier_bytes"]) == {t.name for t in client.lm.cache.tiers}  # RAM apart from disk


def test_chat_completion_shape_and_cached_tokens(client):
    r1 = client.post("/v1/chat/completions", json=chat(system=LONG))
    assert r1.status_code == 200, r1.text
    body = r1.json()
    assert body["object"] == "chat.completion" and body["model"] == MODEL
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello from the fake"}
    assert body["choices"][0]["finish_reason"] == "length"
    u = body["usage"]
    assert u["prompt_tokens_details"]["cached_tokens"] == 0
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["completion_tokens"] == 4
    assert {"lookup_s", "prefill_s", "first_token_s", "ttft_s", "queue_s"} <= set(body["ctxcache"]["timings"])
    r2 = client.post("/v1/chat/completions", json=chat("Other question", system=LONG)).json()
    cached = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 200 and cached % 8 == 0
    assert r2["ctxcache"]["usage"]["by_tier"] == {"memory": cached}


def test_chat_stream_is_sse_with_usage(client):
    body = chat(system=LONG, stream=True, stream_options={"include_usage": True}, max_tokens=10)
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(ln[6:]) for ln in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Hello from the fake model."
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6


def test_stop_sequences(client):
    r = client.post("/v1/chat/completions", json=chat(stop=["fake"], max_tokens=10)).json()
    assert r["choices"][0]["message"]["content"] == "Hello from the" and r["choices"][0]["finish_reason"] == "stop"
    a = client.post("/v1/messages", json=message(stop_sequences=["fake"], max_tokens=10)).json()
    assert a["stop_reason"] == "stop_sequence" and a["stop_sequence"] == "fake"


@pytest.mark.parametrize(
    ("path", "raw", "status", "needle"),
    [
        ("/v1/chat/completions", b'{"model": "fake-model", "messages": [', 400, "malformed JSON"),
        ("/v1/messages", b"{not json", 400, "malformed JSON"),
        ("/v1/chat/completions", json.dumps(chat() | {"model": "gpt-9"}).encode(), 404, "gpt-9"),
        ("/v1/messages", json.dumps(message() | {"model": "claude-x"}).encode(), 404, "fake-model"),
        ("/v1/chat/completions", json.dumps(chat(max_tokens=0)).encode(), 400, "max_tokens"),
        ("/v1/chat/completions", json.dumps(chat(max_tokens=100000)).encode(), 400, "max_tokens must be between"),
        ("/v1/messages", json.dumps(message(max_tokens=100000)).encode(), 400, "max_tokens must be between"),
        ("/v1/messages", json.dumps({"model": MODEL, "messages": []}).encode(), 400, "max_tokens"),
        ("/v1/chat/completions", json.dumps(chat("x" * 600)).encode(), 400, "context limit is 512"),
        ("/v1/messages", json.dumps(message("x" * 600)).encode(), 400, "context limit"),
        ("/v1/chat/completions", json.dumps(chat() | {"messages": [{"role": "robot", "content": "x"}]}).encode(), 400,
         "messages.0.role"),
        ("/v1/chat/completions", json.dumps(chat(temperature=3)).encode(), 400, "temperature"),
        ("/v1/chat/completions", json.dumps(chat(stop=["a", "b", "c", "d", "e"])).encode(), 400, "at most 4"),
        ("/v1/chat/completions", json.dumps(chat(n=2)).encode(), 400, "n:"),
        ("/v1/messages", json.dumps(message() | {"messages": [{"role": "user", "content": [
            {"type": "image", "source": {}}]}]}).encode(), 400, "messages.0.content"),
    ],
)  # fmt: skip
def test_bad_requests_get_a_4xx_that_says_what_is_wrong(client, path, raw, status, needle):
    r = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    body = r.json()
    if path == "/v1/messages":
        assert body["type"] == "error"
    msg = body["error"]["message"]
    assert needle in msg, msg


def test_anthropic_breakpoints_store_pin_and_report_usage():
    with serve(auto_cache=False) as c:
        system = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
        r1 = c.post("/v1/messages", json=message("First?", system=system))
        assert r1.status_code == 200, r1.text
        b1 = r1.json()
        assert b1["type"] == "message" and b1["content"] == [{"type": "text", "text": "Hello from the fake"}]
        assert b1["stop_reason"] == "max_tokens"
        u1 = b1["usage"]
        created = u1["cache_creation_input_tokens"]
        assert created > 200 and u1["cache_read_input_tokens"] == 0
        assert u1["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": created}
        prompt = len(c.lm.encode([{"role": "system", "content": LONG.strip()}, {"role": "user", "content": "First?"}]))
        assert u1["input_tokens"] + created == prompt
        pins = c.get("/healthz").json()["pins"]
        assert pins["pinned_prefixes"] == 1 and pins["pinned_bytes"] > 0
        u2 = c.post("/v1/messages", json=message("Second?", system=system)).json()["usage"]
        assert u2["cache_read_input_tokens"] == created and u2["cache_creation_input_tokens"] == 0
        # auto_cache is off: a request without breakpoints stores nothing
        u3 = c.post("/v1/messages", json=message("No marks here, just text " * 4)).json()["usage"]
        assert u3["cache_creation_input_tokens"] == 0
        # pinned blocks survive evict_all; released pins do not
        assert c.lm.cache.evict_all() == 0
        c.app.state.ctx.pins.clear()
        assert c.lm.cache.evict_all() > 0


def test_anthropic_stream_events():
    with serve() as c:
        body = message("Hi", system=LONG, stream=True, max_tokens=10)
        c.post("/v1/messages", json=message("Warm", system=LONG))
        with c.stream("POST", "/v1/messages", json=body) as r:
            assert r.status_code == 200
            lines = [ln for ln in r.iter_lines() if ln]
    names = [ln[7:] for ln in lines if ln.startswith("event: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    data = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: ")]
    start = data[0]["message"]  # sent before the prefill: the whole prompt counts as input until message_delta
    assert start["usage"]["input_tokens"] > 200 and start["usage"]["cache_read_input_tokens"] == 0
    text = "".join(d["delta"]["text"] for d in data if d["type"] == "content_block_delta")
    assert text == "Hello from the fake model."
    delta = next(d for d in data if d["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "end_turn" and delta["usage"]["output_tokens"] == 6
    assert delta["usage"]["cache_read_input_tokens"] > 200


def test_api_keys_map_to_tenants():
    keys = {"key-a": "tenant-a", "key-b": "tenant-b"}
    with serve(api_keys=keys) as c:
        assert c.post("/v1/chat/completions", json=chat()).status_code == 401
        r = c.post("/v1/chat/completions", json=chat(), headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401 and "invalid API key" in r.json()["error"]["message"]
        r = c.post("/v1/messages", json=message(), headers={"x-api-key": "nope"})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert c.get("/v1/models").status_code == 401
        a = {"Authorization": "Bearer key-a"}
        assert c.post("/v1/chat/completions", json=chat(system=LONG), headers=a).status_code == 200
        again = c.post("/v1/chat/completions", json=chat(system=LONG), headers=a).json()
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        other = c.post("/v1/chat/completions", json=chat(system=LONG), headers={"x-api-key": "key-b"}).json()
        assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # tenants never share blocks
        assert c.get("/healthz").status_code == 200  # health needs no key


def test_queue_limit_gives_429_and_order_is_kept():
    lm = FakeLM()
    lm.gate = threading.Event()
    with serve(lm, max_queue=2) as c, ThreadPoolExecutor(4) as pool:
        url = str(c.base_url)

        def post(i):
            with httpx.Client(base_url=url, timeout=30) as cl:
                return cl.post("/v1/chat/completions", json=chat("x" * (10 + i)))

        running = pool.submit(post, 0)  # taken by the worker, held at the gate
        _wait(lambda: c.get("/healthz").json()["busy"])
        queued = []
        for i in (1, 2):  # one at a time, so that their arrival order is known
            queued.append(pool.submit(post, i))
            _wait(lambda i=i: c.get("/healthz").json()["queue_depth"] == i)
        t0 = time.perf_counter()
        h = c.get("/healthz")  # the event loop is not blocked by the busy model
        assert h.status_code == 200 and time.perf_counter() - t0 < 1.0
        r = c.post("/v1/chat/completions", json=chat())
        assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
        assert "queue is full" in r.json()["error"]["message"]
        lm.gate.set()
        assert [f.result().status_code for f in [running, *queued]] == [200, 200, 200]
    lengths = [int(o.split(":")[1]) for o in lm.order]
    assert lengths == sorted(lengths)  # served in arrival order


def test_metrics_count_requests_tokens_and_ttft(client):
    client.post("/v1/chat/completions", json=chat(system=LONG))
    client.post("/v1/chat/completions", json=chat(system=LONG))
    client.post("/v1/messages", json=message(max_tokens=0))
    text = client.get("/metrics").text
    assert 'ctxcache_requests_total{api="openai",status="200"} 2.0' in text
    assert 'ctxcache_requests_total{api="anthropic",status="400"} 1.0' in text
    values = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines() if ln and not ln.startswith("#")}
    assert values["ctxcache_cache_hit_tokens_total"] > 200
    assert values["ctxcache_prefilled_tokens_total"] > 0
    assert values["ctxcache_ttft_seconds_count"] == 2
    assert values["ctxcache_cache_blocks"] > 0


def test_cache_off_is_a_baseline():
    with serve(cache=False) as c:
        for _ in range(2):
            r = c.post("/v1/chat/completions", json=chat(system=LONG)).json()
            assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert c.lm.cache.stats()["blocks"] == 0


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
