"""The hostile values that once reached the real model and came back as 500s (issue #12, items 2-4):
a seed past 64 bits, a tiny positive temperature, a lone surrogate; both APIs, streamed or not."""

from __future__ import annotations

import json

import pytest
import torch

from ctxcache.integrations.transformers import sample_token
from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

from ..integrations.model_fixture import new_lm

MODEL = "gemma-3-270m"
OA, AN = "/v1/chat/completions", "/v1/messages"


@pytest.fixture(scope="module")
def client():
    import httpx

    app = create_app(new_lm(block_size=32), ServerConfig(), model_id=MODEL)
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=120) as c:
        yield c


def _body(path: str, stream: bool, **kw):
    return {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}], "stream": stream, **kw}


def _ok(r) -> str:
    assert r.status_code == 200, r.text
    assert "error" not in r.text.replace('"stop_reason"', ""), r.text  # no error event mid-stream
    return r.text


@pytest.mark.parametrize("stream", [False, True])
def test_2_a_seed_past_64_bits_samples_like_its_value_mod_2_64(client, stream):
    a = _ok(client.post(OA, json=_body(OA, stream, seed=2**64 + 7, temperature=1.0)))
    b = _ok(client.post(OA, json=_body(OA, stream, seed=7, temperature=1.0)))
    if not stream:
        assert json.loads(a)["choices"] == json.loads(b)["choices"]
    _ok(client.post(OA, json=_body(OA, stream, seed=-(2**70), temperature=1.0)))


@pytest.mark.parametrize("temperature", [1e-300, 5e-324])
@pytest.mark.parametrize("path", [OA, AN])
@pytest.mark.parametrize("stream", [False, True])
def test_3_a_tiny_temperature_decodes_greedily(client, temperature, path, stream):
    _ok(client.post(path, json=_body(path, stream, temperature=temperature)))


@pytest.mark.parametrize("path", [OA, AN])
@pytest.mark.parametrize("stream", [False, True])
def test_4_a_lone_surrogate_is_a_400_not_a_tokenizer_crash(client, path, stream):
    raw = json.dumps(_body(path, stream)).replace('"Hi"', '"\\ud800"').encode()
    r = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 400 and "surrogate" in r.text, r.text
    _ok(client.post(path, json=_body(path, False)))


def test_3_sample_token_at_extreme_temperatures():
    logits = torch.tensor([0.5, 3.0, -2.0, float("-inf")])
    for t in (1e-300, 5e-324, 1e-45):
        assert sample_token(logits, t, 1.0) == 1
        assert sample_token(logits, t, 0.5) == 1
    g = torch.Generator().manual_seed(0)
    assert {sample_token(logits, 1.0, 1.0, g) for _ in range(50)} <= {0, 1, 2}  # -inf is never drawn
