"""The semantic response cache behind both chat APIs: opt-in per tenant, hit headers and usage,
bypasses, bad input in the API's own error shape, admin inspect/erase, and a restart."""

from __future__ import annotations

import contextlib

import httpx
import pytest

from ctxcache import ContextCache
from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

from .conftest import chat, message
from .fake import FakeLM

KEYS = {"sk-team-a-123": "team-a", "sk-team-b-123": "team-b"}
ADMIN = {"authorization": "Bearer admin-secret-1"}
A = {"authorization": "Bearer sk-team-a-123"}
B = {"authorization": "Bearer sk-team-b-123"}


@contextlib.contextmanager
def serve(path, lm=None, admin=None, api_keys=KEYS):
    lm = lm or FakeLM()
    semantic = {"tenants": ["team-a"], "embedder": "hashing", "store": {"kind": "disk", "path": str(path)}}
    admin = {"key": "admin-secret-1"} if admin is None else admin
    cfg = ServerConfig(api_keys=api_keys, semantic=semantic, admin=admin)
    with LiveServer(create_app(lm, cfg, model_id="fake-model")) as url, httpx.Client(base_url=url, timeout=30) as c:
        c.lm = lm
        yield c


@pytest.fixture
def client(tmp_path):
    with serve(tmp_path / "sem") as c:
        yield c


def ask(client, text, headers=A, api="openai", **kw):
    kw.setdefault("temperature", 0)
    if api == "openai":
        return client.post("/v1/chat/completions", json=chat(text, **kw), headers=headers)
    return client.post("/v1/messages", json=message(text, **kw), headers=headers)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_repeat_is_served_from_the_semantic_cache_with_header_and_usage(client, api):
    first = ask(client, "What is the capital of France?", api=api)
    assert first.status_code == 200 and first.headers["x-ctxcache-semantic-cache"] == "miss"
    calls = len(client.lm.order)
    again = ask(client, "  what is the capital of france ", api=api)
    assert again.status_code == 200, again.text
    assert again.headers["x-ctxcache-semantic-cache"] == "hit"
    assert float(again.headers["x-ctxcache-semantic-similarity"]) == 1.0
    sem = again.json()["usage"]["semantic_cache"]
    assert sem["hit"] is True and sem["similarity"] == 1.0 and len(sem["entry_id"]) == 32
    assert len(client.lm.order) == calls  # no model call
    reply = again.json()
    text = reply["choices"][0]["message"]["content"] if api == "openai" else reply["content"][0]["text"]
    orig = first.json()
    assert text == (orig["choices"][0]["message"]["content"] if api == "openai" else orig["content"][0]["text"])


def test_tenant_that_did_not_opt_in_never_hits(client):
    ask(client, "What is the capital of France?")
    r = ask(client, "What is the capital of France?", headers=B)
    assert r.status_code == 200 and "x-ctxcache-semantic-cache" not in r.headers
    assert "semantic_cache" not in r.json()["usage"]


@pytest.mark.parametrize(
    "kw, reason",
    [({"temperature": 0.7}, "temperature"), ({"temperature": None}, "temperature"),
     ({"max_tokens": 3}, None), ({"stream": True}, "stream")],
)  # fmt: skip
def test_sampling_and_other_params_bypass_or_miss(client, kw, reason):
    ask(client, "What is the capital of France?")
    if kw.get("temperature", 0) is None:  # both APIs default to temperature 1: never cached
        body = chat("What is the capital of France?")
        r = client.post("/v1/chat/completions", json=body, headers=A)
    else:
        r = ask(client, "What is the capital of France?", **kw)
    assert r.status_code == 200
    want = "miss" if reason is None else f"bypass; reason={reason}"  # other params: another partition
    assert r.headers["x-ctxcache-semantic-cache"] == want


@pytest.mark.parametrize("api", ["openai", "anthropic"])
@pytest.mark.parametrize("bad", ["1.5", "-0.1", "nan", "high"])
def test_bad_threshold_header_is_a_400_in_the_apis_shape(client, api, bad):
    h = {**A, "x-ctxcache-semantic-threshold": bad}
    r = ask(client, "What is the capital of France?", headers=h, api=api)
    assert r.status_code == 400
    err = r.json()["error"]
    assert "x-ctxcache-semantic-threshold" in err["message"]
    assert (r.json().get("type") == "error") == (api == "anthropic")


def test_threshold_one_header_serves_exact_repeats_only(client):
    ask(client, "What is the capital of France?")
    h = {**A, "x-ctxcache-semantic-threshold": "1"}
    assert ask(client, "What is the capital of France?", headers=h).headers["x-ctxcache-semantic-cache"] == "hit"
    assert ask(client, "What is the capital city of France?", headers=h).headers["x-ctxcache-semantic-cache"] == "miss"


def test_empty_text_passes_to_the_route_uncached(client):
    r = ask(client, "")
    assert r.headers["x-ctxcache-semantic-cache"] == "bypass; reason=empty text"
    assert r.status_code < 500


def test_admin_lists_and_erases_entries(client):
    ask(client, "What is the capital of France?")
    assert client.get("/v1/admin/semantic/entries").status_code == 401
    listed = client.get("/v1/admin/semantic/entries", headers=ADMIN).json()
    assert listed["total"] == 1 and listed["data"][0]["tenant"] == "team-a"
    eid = listed["data"][0]["id"]
    assert client.get(f"/v1/admin/semantic/entries/{eid}", headers=ADMIN).json()["text"].startswith("What is")
    assert client.get("/v1/admin/semantic/entries/zz", headers=ADMIN).status_code == 400
    assert client.delete(f"/v1/admin/semantic/entries/{eid}", headers=ADMIN).json()["erased"] == 1
    assert client.get(f"/v1/admin/semantic/entries/{eid}", headers=ADMIN).status_code == 404
    assert ask(client, "What is the capital of France?").headers["x-ctxcache-semantic-cache"] == "miss"
    assert client.delete("/v1/admin/semantic/tenants/team-a/entries", headers=ADMIN).json()["erased"] == 1
    stats = client.get("/v1/admin/semantic/stats", headers=ADMIN).json()
    assert stats["entries"] == 0 and stats["erased"] == 2


# Semantic admin routes next to the server's own: one admin check must answer them all alike.
ADMIN_ROUTES = [
    ("GET", "/v1/admin/semantic/stats"),
    ("GET", "/v1/admin/semantic/entries"),
    ("DELETE", "/v1/admin/semantic/tenants/team-a/entries"),
    ("GET", "/v1/admin/metrics"),
    ("POST", "/v1/admin/cache/flush"),
]


def test_semantic_admin_routes_refuse_like_the_other_admin_routes(client):
    ask(client, "What is the capital of France?")
    wrong = {"authorization": "Bearer not-the-admin-key"}
    for headers, status in (({}, 401), (A, 403), (wrong, 403)):  # no key; a tenant's own key; a wrong key
        replies = [client.request(method, path, headers=headers) for method, path in ADMIN_ROUTES]
        assert [r.status_code for r in replies] == [status] * len(ADMIN_ROUTES), [r.text for r in replies]
        bodies = [r.json() for r in replies]
        assert all(b == bodies[0] for b in bodies), bodies  # the same error body, word for word
        assert "admin" in bodies[0]["error"]["message"]
    assert client.get("/v1/admin/semantic/stats", headers=ADMIN).json()["entries"] == 1  # refusals erased nothing
    assert client.get("/v1/admin/metrics", headers=ADMIN).status_code == 200  # [admin] key opens every route


def test_a_tenancy_admin_key_opens_the_semantic_admin_routes(tmp_path):
    lm = FakeLM()
    lm.cache = ContextCache.from_config(
        {
            "block_size": lm.block_size,
            "tiers": [{"kind": "memory", "capacity": 1 << 20}],
            "tenants": {"team-a": {"api_keys": ["sk-team-a-123"]}},
            "tenancy": {"admin_keys": ["adm-tenancy-1"]},
        }
    )
    with serve(tmp_path / "sem", lm, admin={}, api_keys={}) as c:
        assert c.get("/v1/admin/semantic/stats", headers={"authorization": "Bearer adm-tenancy-1"}).status_code == 200
        assert c.get("/v1/admin/semantic/stats", headers=A).status_code == 403


def test_restart_keeps_entries(tmp_path):
    with serve(tmp_path / "sem") as c:
        ask(c, "What is the capital of France?")
    lm = FakeLM()
    with serve(tmp_path / "sem", lm) as c:
        r = ask(c, "What is the capital of France?")
        assert r.headers["x-ctxcache-semantic-cache"] == "hit" and lm.order == []
