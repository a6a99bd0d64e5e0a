"""Tenants through the HTTP API: keys, isolation, cache_salt, priority order, admin routes."""

from __future__ import annotations

import logging
import threading
import time

import httpx

from ctxcache import ContextCache

from .conftest import chat, serve
from .fake import FakeLM

TENANTS = {
    "a": {"api_keys": ["sk-a"], "priority": 2},
    "b": {"api_keys": ["sk-b"], "priority": 2},
    "slo": {"api_keys": ["sk-slo"], "priority": 1},
    "sys": {"api_keys": ["sk-sys"], "priority": 0},
}
ADMIN = {"Authorization": "Bearer adm"}


def tenant_lm(**tenancy):
    lm = FakeLM()
    lm.cache = ContextCache.from_config(
        {
            "block_size": lm.block_size,
            "tiers": [{"kind": "memory", "capacity": 1 << 20}],
            "tenants": TENANTS,
            "tenancy": {"admin_keys": ["adm"], **tenancy},
        }
    )
    return lm


def key(k):
    return {"Authorization": f"Bearer {k}"}


def cached(c, k, **kw):
    r = c.post("/v1/chat/completions", json=chat("tell me about tenancy " * 4, **kw), headers=key(k))
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_tenants_are_isolated_and_cache_salt_narrows_sharing():
    with serve(tenant_lm()) as c:
        assert cached(c, "sk-a") == 0 and cached(c, "sk-a") > 0
        assert cached(c, "sk-b") == 0  # the same prompt, another tenant
        assert cached(c, "sk-a", cache_salt="s1") == 0 and cached(c, "sk-a", cache_salt="s1") > 0
        r = c.post("/v1/chat/completions", json=chat("x", cache_salt="no spaces allowed"), headers=key("sk-a"))
        assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt"
        assert c.post("/v1/chat/completions", json=chat("x"), headers=key("sk-nobody")).status_code == 401


def test_completions_take_cache_salt_too():
    def completion(**kw):
        body = {"model": "fake-model", "prompt": "salted raw prompt " * 6, "max_tokens": 2, **kw}
        r = c.post("/v1/completions", json=body, headers=key("sk-a"))
        assert r.status_code == 200, r.text
        return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    with serve(tenant_lm()) as c:
        assert completion() == 0 and completion() > 0
        assert completion(cache_salt="s1") == 0 and completion(cache_salt="s1") > 0
        r = c.post(
            "/v1/completions", json={"model": "fake-model", "prompt": "x", "cache_salt": "a b"}, headers=key("sk-a")
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt"


def test_admin_routes_need_the_admin_key(caplog):
    with serve(tenant_lm()) as c:
        cached(c, "sk-a")
        cached(c, "sk-b")
        for method, path in [
            ("DELETE", "/v1/admin/tenants/a/cache"),
            ("POST", "/v1/admin/cache/flush"),
            ("GET", "/v1/admin/tenants/a/usage"),
        ]:
            assert c.request(method, path).status_code == 401
            r = c.request(method, path, headers=key("sk-a"))  # a tenant's own key opens nothing
            assert r.status_code == 403 and "admin" in r.json()["error"]["message"]
        assert c.get("/v1/admin/tenants/nobody/usage", headers=ADMIN).status_code == 404
        u = c.get("/v1/admin/tenants/a/usage", headers=ADMIN).json()
        assert u["blocks"] > 0 and u["tiers"]["memory"]["bytes"] > 0
        assert cached(c, "sk-a") > 0  # nothing was lost by the refused calls
        with caplog.at_level(logging.INFO, logger="ctxcache.audit"):
            r = c.delete("/v1/admin/tenants/a/cache", headers=ADMIN)
        assert r.status_code == 200 and r.json()["verified"] and r.json()["erased_blocks"] > 0
        assert any("erase tenant=a" in rec.getMessage() for rec in caplog.records)
        assert c.get("/v1/admin/tenants/a/usage", headers=ADMIN).json()["blocks"] == 0
        assert cached(c, "sk-a") == 0  # erased: a later identical prompt misses
        assert cached(c, "sk-b") > 0  # b untouched
        r = c.post("/v1/admin/cache/flush", headers=ADMIN)
        assert r.status_code == 200 and r.json()["erased_blocks"] > 0
        assert cached(c, "sk-b") == 0


def test_pinned_cap_is_a_clear_4xx():
    with serve(tenant_lm(max_pinned=64)) as c:
        r = c.post("/v1/chat/completions", json=chat("a long system prompt " * 8), headers=key("sk-sys"))
        assert r.status_code == 429 and "pinned" in r.json()["error"]["message"]
        assert cached(c, "sk-a") == 0  # the server is fine


def _wait(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_class_1_request_goes_before_queued_class_2_work():
    lm = tenant_lm()
    lm.gate = threading.Event()
    with serve(lm) as c:
        url = str(c.base_url)

        def send(k, text):
            with httpx.Client(base_url=url, timeout=30) as h:
                h.post("/v1/chat/completions", json=chat(text), headers=key(k))

        first = threading.Thread(target=send, args=("sk-a", "first"))
        first.start()
        _wait(lambda: c.get("/healthz").json()["busy"])  # running, held by the gate
        later = [threading.Thread(target=send, args=(k, t)) for k, t in (("sk-b", "second"), ("sk-slo", "third"))]
        for i, t in enumerate(later, 1):
            t.start()
            _wait(lambda i=i: c.get("/healthz").json()["queue_depth"] == i)  # b queued before slo
        lm.gate.set()
        for t in [first, *later]:
            t.join(timeout=30)
        assert [o.split(":")[0] for o in lm.order] == ["a", "slo", "b"]
