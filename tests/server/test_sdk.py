"""The official openai and anthropic SDKs against a live server (fake model): every error class with
its type and code, /v1/completions, count_tokens, and streams that start before a long prefill ends."""

from __future__ import annotations

import threading
import time

import anthropic
import httpx
import openai
import pytest

from .conftest import MODEL, chat, serve
from .fake import FakeLM

LONG = "You are a helpful assistant for the harbour museum. " * 8


class BrokenLM(FakeLM):
    def stream_tokens(self, prompt, params=None, **kw):
        raise RuntimeError("secret internal detail")


def oa(c: httpx.Client, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(base_url=str(c.base_url).rstrip("/") + "/v1", api_key=key, max_retries=0)


def an(c: httpx.Client, key: str = "sk-test") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=str(c.base_url).rstrip("/"), api_key=key, max_retries=0)


def _chat(client: openai.OpenAI, text: str = "Hi", **kw):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}], **kw)


def _msg(client: anthropic.Anthropic, text: str = "Hi", **kw):
    return client.messages.create(model=kw.pop("model", MODEL), max_tokens=kw.pop("max_tokens", 4),
                                  messages=[{"role": "user", "content": text}], **kw)  # fmt: skip


@pytest.mark.parametrize(
    ("call", "cls", "status", "code"),
    [
        (lambda o: _chat(o, max_tokens=4, temperature=3), openai.BadRequestError, 400, "invalid_value"),
        (
            lambda o: _chat(o, max_tokens=4, tools=[{"type": "function", "function": {"name": "f"}}]),
            openai.BadRequestError,
            400,
            "unsupported_parameter",
        ),  # fmt: skip
        (lambda o: _chat(o, "x" * 600, max_tokens=4), openai.BadRequestError, 400, "context_length_exceeded"),
        (
            lambda o: o.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "x"}]),
            openai.NotFoundError,
            404,
            "model_not_found",
        ),  # fmt: skip
        (lambda o: _chat(o, "y" * 4000, max_tokens=4), openai.APIStatusError, 413, "request_too_large"),
    ],
    ids=["invalid_value", "unsupported_parameter", "context_length", "model_not_found", "too_large"],
)
def test_openai_errors_come_out_as_the_sdks_classes_with_codes(call, cls, status, code):
    with serve(max_body_bytes=2048) as c, pytest.raises(cls) as exc:
        call(oa(c))
    assert exc.value.status_code == status and exc.value.code == code
    assert exc.value.type in ("invalid_request_error", "server_error", "requests")


def test_openai_auth_rate_limit_and_server_errors():
    with serve(api_keys={"sk-good": "t"}) as c:
        with pytest.raises(openai.AuthenticationError) as exc:
            _chat(oa(c, "sk-bad"), max_tokens=4)
        assert exc.value.code == "invalid_api_key"
    lm = FakeLM()
    lm.gate = threading.Event()
    with serve(lm, max_queue=1) as c:
        busy = [
            threading.Thread(target=c.post, args=("/v1/chat/completions",), kwargs={"json": chat()}) for _ in range(2)
        ]
        for t in busy:
            t.start()
            time.sleep(0.3)
        try:
            with pytest.raises(openai.RateLimitError) as exc:
                _chat(oa(c), max_tokens=4)
            assert exc.value.code == "rate_limit_exceeded" and exc.value.type == "requests"
        finally:
            lm.gate.set()
            for t in busy:
                t.join()
    with serve(BrokenLM()) as c, pytest.raises(openai.InternalServerError) as exc:
        _chat(oa(c), max_tokens=4)
    assert exc.value.code == "internal_error" and "secret" not in str(exc.value)


def test_anthropic_errors_come_out_as_the_sdks_classes_with_types():
    cases = [
        (lambda a: _msg(a, extra_body={"temperature": 3}), anthropic.BadRequestError, "invalid_request_error"),
        (lambda a: _msg(a, extra_body={"top_k": 5}), anthropic.BadRequestError, "invalid_request_error"),
        (lambda a: _msg(a, model="claude-x"), anthropic.NotFoundError, "not_found_error"),
        (lambda a: _msg(a, "y" * 4000), anthropic.RequestTooLargeError, "request_too_large"),
    ]
    with serve(max_body_bytes=2048) as c:
        for call, cls, kind in cases:
            with pytest.raises(cls) as exc:
                call(an(c))
            assert exc.value.body["type"] == "error" and exc.value.body["error"]["type"] == kind
    with serve(api_keys={"sk-good": "t"}) as c, pytest.raises(anthropic.AuthenticationError) as exc:
        _msg(an(c, "sk-bad"))
    assert exc.value.body["error"]["type"] == "authentication_error"
    with serve(BrokenLM()) as c, pytest.raises(anthropic.InternalServerError) as exc:
        _msg(an(c))
    assert exc.value.body["error"]["type"] == "api_error" and "secret" not in str(exc.value)


def test_openai_completions_plain_and_streaming_report_cached_tokens():
    with serve() as c:
        client = oa(c)
        first = client.completions.create(model=MODEL, prompt=LONG, max_tokens=3)
        assert first.choices[0].text == "Hello from the" and first.choices[0].finish_reason == "length"
        assert first.usage.prompt_tokens == len(LONG) and first.usage.prompt_tokens_details.cached_tokens == 0
        chunks = list(
            client.completions.create(
                model=MODEL, prompt=LONG, max_tokens=6, stream=True, stream_options={"include_usage": True}
            )
        )
        assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == "Hello from the fake model."
        usage = chunks[-1].usage
        assert usage.prompt_tokens_details.cached_tokens == (len(LONG) - 1) // 8 * 8  # all but the last token
        ids = client.completions.create(model=MODEL, prompt=[ord(ch) for ch in "abc"], max_tokens=2)
        assert ids.usage.prompt_tokens == 3
        with pytest.raises(openai.BadRequestError, match="outside this model's vocabulary"):
            client.completions.create(model=MODEL, prompt=[5, 10**6], max_tokens=2)


def test_count_tokens_equals_what_the_model_then_reports():
    with serve() as c:
        client = an(c)
        for system in (None, LONG):
            extra = {"system": system} if system else {}
            counted = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "Hi"}], **extra)
            used = _msg(client, **extra).usage
            total = used.input_tokens + used.cache_read_input_tokens + used.cache_creation_input_tokens
            assert counted.input_tokens == total > 0
        tok = c.post("/tokenize", json={"messages": [{"role": "user", "content": "Hi"}]}).json()
        assert tok["count"] == counted.input_tokens - len(f"<system>{LONG.strip()}</>")
        assert c.post("/detokenize", json={"tokens": tok["tokens"]}).json()["prompt"] == "<user>Hi</><model>"


def test_anthropic_stream_starts_before_a_long_prefill_and_pings_during_it():
    lm = FakeLM()
    lm.prefill_delay = 2.0
    with serve(lm, keepalive_s=0.25) as c:
        t0 = time.perf_counter()
        seen: list[tuple[float, str]] = []
        for ev in _msg(an(c), stream=True):
            seen.append((time.perf_counter() - t0, ev.type))
        first_t, first = seen[0]
        text_t = next(t for t, kind in seen if kind == "content_block_delta")
        # (relative times: on a loaded machine the client alone may take a second to connect)
        assert first == "message_start" and text_t - first_t >= 1.0  # sent as the 2 s prefill began
        with c.stream("POST", "/v1/messages", json={"model": MODEL, "max_tokens": 4, "stream": True,
                                                    "messages": [{"role": "user", "content": "Hi"}]}) as r:  # fmt: skip
            lines = [ln for ln in r.iter_lines() if ln.startswith("event: ")]
        pings = lines.index("event: content_block_delta") - lines.index("event: content_block_start")
        assert pings >= 1 + 4  # the opening ping plus keep-alives every 0.25 s of a 2 s prefill


def test_openai_streams_send_the_role_first_and_comment_keepalives_the_sdk_skips():
    lm = FakeLM()
    lm.prefill_delay = 2.0
    with serve(lm, keepalive_s=0.25) as c:
        stream = _chat(oa(c), max_tokens=4, stream=True)
        first = next(iter(stream))
        t_first = time.perf_counter()
        assert first.choices[0].delta.role == "assistant"
        assert "".join(ch.choices[0].delta.content or "" for ch in stream) == "Hello from the fake"
        assert time.perf_counter() - t_first >= 1.0  # the role chunk came as the 2 s prefill began
        with c.stream("POST", "/v1/completions", json={"model": MODEL, "prompt": "Hi", "stream": True}) as r:
            lines = list(r.iter_lines())
        assert sum(ln == ": keep-alive" for ln in lines) >= 3 and "data: [DONE]" in lines
