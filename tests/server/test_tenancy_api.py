"""Tenants through the HTTP API: keys, isolation, cache_salt, priority order, admin routes."""

from __future__ import annotations

import hashlib
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


def test_no_public_or_tenant_route_shows_another_tenant_and_admins_get_tenant_metrics():
    """Item 7: /metrics, health, dashboard feed and /v1/models name or count no tenant; the
    per-tenant series are at /v1/admin/metrics, behind the admin key."""
    from prometheus_client.parser import text_string_to_metric_families

    lm = FakeLM()
    lm.cache = ContextCache.from_config(
        {
            "block_size": lm.block_size,
            "tiers": [{"kind": "memory", "capacity": 1 << 20}],
            "tenants": {"alice-co": {"api_keys": ["sk-alice"]}, "bob-co": {"api_keys": ["sk-bob"]}},
            "tenancy": {"admin_keys": ["adm"]},
        }
    )
    with serve(lm) as c:
        cached(c, "sk-alice")
        cached(c, "sk-bob")
        cached(c, "sk-bob")
        for path in ("/metrics", "/healthz", "/readyz", "/dashboard/data", "/dashboard", "/v1/models"):
            for headers in ({}, key("sk-alice")):
                body = c.get(path, headers=headers).text
                assert "bob-co" not in body and "alice-co" not in body, path
        public = c.get("/metrics").text
        assert 'tenant="' not in public
        assert 'ctxcache_served_requests_total{ab_group="a"} 3.0' in public
        assert c.get("/v1/admin/metrics").status_code == 401
        assert c.get("/v1/admin/metrics", headers=key("sk-alice")).status_code == 403
        r = c.get("/v1/admin/metrics", headers=ADMIN)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(r.text)
        for s in fam.samples
    }
    assert got[("ctxcache_tenant_requests_total", (("ab_group", "a"), ("tenant", "bob-co")))] == 2
    assert got[("ctxcache_tenant_hit_tokens_total", (("ab_group", "a"), ("tenant", "bob-co")))] > 0
    assert got[("ctxcache_tenant_tier_bytes", (("tenant", "alice-co"), ("tier", "memory")))] > 0


def test_a_group_b_job_does_not_unseat_tenancy_and_erasure_reaches_group_b_cache():
    """With A/B on, a group-b job swaps ``lm.cache`` for group b's own cache (no tenancy) while it
    runs: keys must still be checked against the server's tenancy then, and an erasure must reach
    group b's cache too."""
    from ctxcache.observability.ab import ABConfig
    from ctxcache.observability.service import ObsConfig

    lm = tenant_lm()
    alt = {"block_size": lm.block_size, "tiers": [{"kind": "memory", "capacity": 1 << 20}]}
    obs = ObsConfig(log_every_s=3600, ab=ABConfig(fraction=1.0, cache=alt))  # every tenant in group b
    with serve(lm, observability=obs) as c:
        assert cached(c, "sk-a") == 0 and cached(c, "sk-a") > 0
        group_b = c.app.state.obs.alt_caches["b"]
        assert group_b.tenant_usage("a")["blocks"] > 0
        main, lm.cache = lm.cache, group_b  # as during a group-b job on the model thread
        try:
            assert c.get("/v1/models").status_code == 401  # not the keyless "default" tenant
            r = c.delete("/v1/admin/tenants/a/cache", headers=ADMIN)
            assert r.status_code == 200 and r.json()["verified"], r.text
        finally:
            lm.cache = main
        assert group_b.tenant_usage("a")["blocks"] == 0 and cached(c, "sk-a") == 0


def test_a_stored_digest_sent_as_the_key_opens_nothing():
    """Keys may be configured as their digests; a client that read one (a config file, a backup)
    and sends it in place of the key is refused on the tenant and the admin routes alike."""
    adm = "sha256:" + hashlib.sha256(b"adm2").hexdigest()
    with serve(tenant_lm(admin_keys=[adm])) as c:
        assert c.get("/v1/admin/tenants/a/usage", headers=key("adm2")).status_code == 200
        r = c.get("/v1/admin/tenants/a/usage", headers=key(adm))
        assert r.status_code == 403 and "admin" in r.json()["error"]["message"]
        tenant = "sha256:" + hashlib.sha256(b"sk-a").hexdigest()
        r = c.post("/v1/chat/completions", json=chat("hello there " * 4), headers=key(tenant))
        assert r.status_code == 401, r.text
