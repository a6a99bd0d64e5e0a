"""Hostile requests against the fake model: each gets a 4xx in its API's own error shape, and the
server keeps serving. The numbered defects of issue #12 each have a test here (or in
test_hostile_model.py / test_signals.py for the ones that need the real model or process)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from .conftest import MODEL, chat, message, serve
from .fake import FakeLM

OA, AN = "/v1/chat/completions", "/v1/messages"
HUGE = 40_000  # characters: past the server's large-prompt lane threshold (32k)


def _set(body: dict[str, Any], key: str, value: Any) -> bytes:
    return json.dumps({**body, key: value}).encode()


def _msgs(path: str, value: Any) -> bytes:
    base = chat() if path == OA else message()
    return json.dumps({**base, "messages": value}).encode()


def _without(body: dict[str, Any], key: str) -> bytes:
    return json.dumps({k: v for k, v in body.items() if k != key}).encode()


_WRONG = [None, True, -1, 1.5, "x", [], {}, [1], {"a": 1}]
_BAD_NUMBERS = [-1, -1e30, 1e30, 2**70, -(2**70), "1", True, [1], 1e400]


def _table() -> list[tuple[str, str, bytes]]:
    """(id, path, raw body): at least 200 bodies that must each get a 4xx."""
    cases: list[tuple[str, str, bytes]] = []

    def add(name: str, path: str, raw: bytes) -> None:
        cases.append((f"{'oa' if path == OA else 'an'}-{len(cases):03d}-{name}", path, raw))

    for path, base in ((OA, chat()), (AN, message())):
        for v in [None, 5, [], {}, "", True]:
            add("model", path, _set(base, "model", v))
        for v in [None, "hi", 5, {}, []]:
            add("messages", path, _set(base, "messages", v))
        for key in ("model", "messages"):
            add(f"missing-{key}", path, _without(base, key))
        for v in [0, -5, 10**9, 2**64, "4", 1.5, [4], True]:
            add("max_tokens", path, _set(base, "max_tokens", v))
        for v in [-0.1, 2.5, 1e308, "hot", [1.0], {}]:
            add("temperature", path, _set(base, "temperature", v))
        for v in [0, -1, 1.5, "all", []]:
            add("top_p", path, _set(base, "top_p", v))
        for v in ["yes", 2, [], {}]:
            add("stream", path, _set(base, "stream", v))
        for role in ["tool", "function", "", None, 5, "USER", "model"]:
            add("role", path, _msgs(path, [{"role": role, "content": "x"}]))
        for content in [None, 5, {}, [{"type": "image"}], [{"type": "text"}], [{"type": "text", "text": 5}], [5]]:
            add("content", path, _msgs(path, [{"role": "user", "content": content}]))
        add("message-not-object", path, _msgs(path, ["hello"]))
        add("message-no-role", path, _msgs(path, [{"content": "x"}]))
        add("message-no-content", path, _msgs(path, [{"role": "user"}]))
        add("over-long-prompt", path, _msgs(path, [{"role": "user", "content": "x" * 600}]))
        add("many-messages", path, _msgs(path, [{"role": "user", "content": "hello there"}] * 60))
        add("surrogate-content", path, json.dumps(base).replace('"Hi"', '"\\ud800"').encode())
        add("surrogate-model", path, json.dumps(base).replace(f'"{MODEL}"', '"\\udfff"').encode())
        add("surrogate-key", path, json.dumps(base)[:-1].encode() + b', "\\ud800": 1}')
        for raw in [
            b"",
            b"null",
            b"[]",
            b'"a string"',
            b"5",
            b"{",
            b'{"model": ',
            b"{'model': 'x'}",
            b"\xff\xfe\xfd",
            json.dumps(base).encode()[:-1] + b"\xff}",
            b'{"model": "\xc3\x28"}',
            json.dumps(base).replace("4", "NaN").encode(),
            json.dumps(base).replace("4", "Infinity").encode(),
            json.dumps(base).replace("4", "1e999999").encode(),
            b"[" * 100_000 + b"]" * 100_000,
            b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
            json.dumps({**base, "deep": json.loads("[" * 500 + "]" * 500)})
            .replace('"Hi"', "[" * 2000 + "]" * 2000)
            .encode(),
            b"\x00" * 64,
        ]:
            add("raw", path, raw)

    for v in ["1", 1.5, [1], True, "1e3", {}]:
        add("seed", OA, _set(chat(), "seed", v))
        add("seed-stream", OA, _set(chat(stream=True), "seed", v))
    for v in [["a"] * 5, "", [""], [1], {}, 5, [None]]:
        add("stop", OA, _set(chat(), "stop", v))
    for v in [0, 2, -1, "1"]:
        add("n", OA, _set(chat(), "n", v))
    for v in ["yes", {"include_usage": "maybe"}, []]:
        add("stream_options", OA, _set(chat(stream=True), "stream_options", v))
    add("oa-missing-max-tokens-huge-default", OA, _set(chat(), "max_completion_tokens", 10**6))

    block = {"type": "text", "text": "Hi"}
    for cc in [
        {"type": "persistent"},
        {"type": "ephemeral", "ttl": "10m"},
        {"type": "ephemeral", "ttl": 5},
        "yes",
        5,
        {},
    ]:
        add("cache_control", AN, _msgs(AN, [{"role": "user", "content": [{**block, "cache_control": cc}]}]))
        add("top-cache_control", AN, _set(message(), "cache_control", cc))
        add("system-cache_control", AN, _set(message(), "system", [{**block, "cache_control": cc}]))
    marked = {**block, "cache_control": {"type": "ephemeral"}}
    add("five-breakpoints", AN, _msgs(AN, [{"role": "user", "content": [marked] * 5}]))
    five = {**message(), "system": [marked] * 3, "cache_control": {"type": "ephemeral"}}
    add("breakpoints-system-messages-top", AN, _set(five, "messages", [{"role": "user", "content": [marked]}]))
    for v in [5, {}, [5], [{"type": "text"}], [{"type": "image", "source": {}}]]:
        add("system", AN, _set(message(), "system", v))
    for v in ["stop", [""], [5], {}]:
        add("stop_sequences", AN, _set(message(), "stop_sequences", v))
    for v in [0, -1, "5", 1.5]:
        add("top_k", AN, _set(message(), "top_k", v))
    for v in ["x", 5, []]:
        add("metadata", AN, _set(message(), "metadata", v))
    add("empty-content-list", AN, _msgs(AN, [{"role": "user", "content": []}]))
    add("empty-content-string", AN, _msgs(AN, [{"role": "user", "content": ""}]))
    add("missing-max-tokens", AN, _without(message(), "max_tokens"))
    add("temperature-above-1", AN, _set(message(), "temperature", 1.5))
    add("system-role-in-messages", AN, _msgs(AN, [{"role": "system", "content": "x"}]))
    return cases


TABLE = _table()


def test_the_table_has_at_least_200_bodies():
    assert len(TABLE) >= 200, len(TABLE)


@pytest.fixture(scope="module")
def shared():
    with serve() as c:
        yield c


def assert_api_error(path: str, r: httpx.Response, lo: int = 400, hi: int = 499) -> dict[str, Any]:
    assert lo <= r.status_code <= hi, (r.status_code, r.text[:500])
    body = r.json()
    if path.startswith(AN):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body


@pytest.mark.parametrize(("path", "raw"), [(p, r) for _, p, r in TABLE], ids=[i for i, _, _ in TABLE])
def test_hostile_body_gets_a_4xx_in_the_apis_shape_and_the_server_keeps_serving(shared, path, raw):
    r = shared.post(path, content=raw, headers={"content-type": "application/json"})
    assert_api_error(path, r)
    ok = shared.post(path, json=chat() if path == OA else message())
    assert ok.status_code == 200, ok.text


# --- the numbered defects ------------------------------------------------------------------------
@pytest.mark.parametrize("path", [OA, AN])
@pytest.mark.parametrize("stream", [False, True])
def test_4_a_lone_surrogate_is_a_400(shared, path, stream):
    base = (chat if path == OA else message)(text="SURROGATE", stream=stream)
    raw = json.dumps(base).replace("SURROGATE", "\\ud800").encode()
    r = shared.post(path, content=raw, headers={"content-type": "application/json"})
    body = assert_api_error(path, r, 400, 400)
    assert "messages.0.content" in body["error"]["message"] and "surrogate" in body["error"]["message"]


class _Exploding(FakeLM):
    def stream_tokens(self, prompt, params=None, **kw):
        raise RuntimeError("secret detail at /srv/internal/path.py")


class _BadEncoder(FakeLM):
    def encode(self, messages, *, add_generation_prompt=True):
        raise KeyError("tokenizer internals")


@pytest.mark.parametrize("lm_cls", [_Exploding, _BadEncoder])
@pytest.mark.parametrize("path", [OA, AN])
def test_5_a_500_says_internal_error_and_a_request_id_never_the_exception(lm_cls, path, caplog):
    with serve(lm_cls()) as c:
        r = c.post(path, json=chat() if path == OA else message(), headers={"x-request-id": "req-42"})
    body = assert_api_error(path, r, 500, 500)
    msg = body["error"]["message"]
    assert "req-42" in msg and r.headers["x-request-id"] == "req-42"
    for leak in ("secret", "RuntimeError", "KeyError", "internals", ".py"):
        assert leak not in r.text
    assert "req-42" in caplog.text  # the detail is in the log, under the same id


def test_5_a_stream_that_fails_sends_no_internals():
    with serve(_Exploding()) as c:
        r = c.post(OA, json=chat(stream=True))
    assert "secret" not in r.text and "RuntimeError" not in r.text


@pytest.mark.parametrize("path", [OA, AN])
def test_6_a_body_over_the_limit_is_a_413_before_parsing(path):
    lm = FakeLM()
    with serve(lm, max_body_bytes="64KiB") as c:
        big = json.dumps((chat if path == OA else message)(text="x" * 100_000)).encode()
        r = c.post(path, content=big, headers={"content-type": "application/json"})
        body = assert_api_error(path, r, 413, 413)
        assert "64" in body["error"]["message"] or "65536" in body["error"]["message"]

        def chunks():  # no Content-Length: the limit holds while the body streams in
            for i in range(0, len(big), 8192):
                yield big[i : i + 8192]

        r = c.post(path, content=chunks(), headers={"content-type": "application/json"})
        assert_api_error(path, r, 413, 413)
        assert lm.order == []  # nothing reached the model
        assert c.post(path, json=chat() if path == OA else message()).status_code == 200


def test_6_the_default_limit_refuses_a_10_mb_body():
    with serve() as c:
        r = c.post(OA, content=b" " * (10 << 20), headers={"content-type": "application/json"})
    assert_api_error(OA, r, 413, 413)


class _SlowTokenizer(FakeLM):
    def encode(self, messages, *, add_generation_prompt=True):
        if any("SLOW" in m["content"] for m in messages):
            time.sleep(1.5)  # a huge prompt being tokenized
        return super().encode(messages, add_generation_prompt=add_generation_prompt)


def test_6_a_huge_prompt_is_tokenized_off_the_model_thread_and_small_ones_pass_it():
    lm = _SlowTokenizer(max_context=20_000)
    with serve(lm, max_context=200_000) as c, ThreadPoolExecutor(2) as pool:
        huge = pool.submit(c.post, OA, json=chat("SLOW" + "x" * HUGE))
        time.sleep(0.2)
        t0 = time.perf_counter()
        small = c.post(OA, json=chat("quick"))
        took = time.perf_counter() - t0
        assert small.status_code == 200 and took < 1.0, took
        r = huge.result()
    body = assert_api_error(OA, r, 400, 400)  # over the fake's 20k context: refused, never run
    assert body["error"]["code"] == "context_length_exceeded"
    assert not any(o.endswith(str(HUGE)) for o in lm.order)


def test_7_the_published_schema_refuses_an_empty_anthropic_content_list(shared):
    spec = shared.get("/openapi.json").json()
    content = spec["components"]["schemas"]["AnthropicMessage"]["properties"]["content"]
    branches = {b.get("type"): b for b in content["anyOf"]}
    assert branches["array"].get("minItems") == 1 and branches["string"].get("minLength") == 1


@pytest.mark.parametrize(("path", "body"), [(OA, chat()), (AN, message())])
def test_8_a_trailing_slash_serves_the_route(shared, path, body):
    r = shared.post(path + "/", json=body)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.json()["usage"]["output_tokens" if path == AN else "completion_tokens"] == 4
    assert shared.get("/v1/models/").json()["data"][0]["id"] == MODEL


def test_concurrent_hostile_and_normal_clients_all_get_answers():
    bad = [raw for _, p, raw in TABLE if p == OA][:40]
    with serve() as c, ThreadPoolExecutor(8) as pool:
        hostile = list(pool.map(lambda raw: c.post(OA, content=raw, headers={"content-type": "application/json"}), bad))
        normal = list(pool.map(lambda _: c.post(OA, json=chat()), range(16)))
    assert all(400 <= r.status_code < 500 for r in hostile)
    assert all(r.status_code == 200 for r in normal)


def test_a_request_id_is_echoed_or_made(shared):
    assert len(shared.get("/healthz").headers["x-request-id"]) == 32
    assert shared.get("/healthz", headers={"x-request-id": "abc-1"}).headers["x-request-id"] == "abc-1"
    bad = shared.get("/healthz", headers={"x-request-id": "x" * 500}).headers["x-request-id"]
    assert bad != "x" * 500
