"""The admin routes that replicate between regions, through the HTTP API: each acts here, then
submits to the region's log; bad input is a 4xx in the API's shape; a region Redis that does not
answer is a 503 after the local effect (retrying is safe)."""

from __future__ import annotations

import time

import pytest

from ctxcache import ContextCache
from ctxcache.errors import ConfigError
from ctxcache.replication import RedisLog, Replicator
from ctxcache.server import ServerConfig, create_app, load_server_config

from .conftest import chat, serve
from .fake import FakeLM

ADMIN = {"Authorization": "Bearer adm-key-1"}
TENANTS = {"acme": {"api_keys": ["sk-acme"]}, "other": {"api_keys": ["sk-other"]}}


def lm_on(redis_url):
    lm = FakeLM()
    lm.cache = ContextCache.from_config({
        "block_size": lm.block_size,
        "tiers": [{"kind": "memory", "capacity": 1 << 20},
                  {"kind": "redis", "capacity": 1 << 22, "url": redis_url, "prefix": "kv:", "timeout": 0.5}],
        "tenants": TENANTS, "tenancy": {"admin_keys": ["adm-key-1"]},
    })  # fmt: skip
    return lm


def inbox(url, region="a"):
    return [f for _, f in RedisLog(url, region).inbox("", 100)]


@pytest.mark.parametrize(
    "table, msg",
    [
        ({"region": "no spaces"}, "region"),
        ({"region": "a", "colour": "red"}, "unknown \\[replication\\] keys"),
        ({"region": "a", "url": "http://x"}, "replication.url"),
        ({"region": "a", "poll_ms": 0}, "poll_ms"),
        ({"url": "redis://127.0.0.1:1/0"}, "needs region"),
    ],
)
def test_a_bad_replication_table_fails_at_load(table, msg):
    with pytest.raises(ConfigError, match=msg):
        load_server_config({"replication": table})
    with pytest.raises(ConfigError, match="no Redis tier"):
        load_server_config({"replication": {"region": "a"}, "cache": {"tiers": [{"kind": "memory", "capacity": 1024}]}})
    with pytest.raises(ConfigError, match="no Redis tier"):  # the app's own cache, RAM only
        create_app(FakeLM(), ServerConfig(replication={"region": "a"}))


def test_erasure_invalidation_ttl_and_pins_are_submitted_to_the_region(redis_url):
    with serve(lm_on(redis_url), replication={"region": "a"}) as c:
        key = {"Authorization": "Bearer sk-acme"}
        assert c.post("/v1/chat/completions", json=chat("hello " * 40), headers=key).status_code == 200
        r = c.delete("/v1/admin/tenants/acme/cache", headers=ADMIN)
        assert r.status_code == 200 and r.json()["replication"] == {"region": "a", "submitted": True}
        assert r.json()["verified"] and r.json()["erased_blocks"] > 0
        r = c.put("/v1/admin/tenants/acme/ttl", json={"ttl": 30}, headers=ADMIN)
        assert r.status_code == 200, r.text
        r = c.post("/v1/admin/cache/invalidate", json={"key": "ab" * 16}, headers=ADMIN)
        assert r.status_code == 200 and r.json()["verified"], r.text
        assert c.put(f"/v1/admin/cache/pins/{'cd' * 16}", headers=ADMIN).status_code == 200
        assert c.delete(f"/v1/admin/cache/pins/{'cd' * 16}", headers=ADMIN).status_code == 200
        got = [(f["k"], f["t"], f["v"]) for f in inbox(redis_url)]
        assert got == [("erase_tenant", "acme", None), ("ttl", "acme", 30.0), ("invalidate", "ab" * 16, None),
                       ("pin", "cd" * 16, True), ("pin", "cd" * 16, False)]  # fmt: skip
        # the region's replicator stamps them; this worker's follower applies them and reports
        Replicator("a", RedisLog(redis_url, "a"), {}).step()
        deadline = time.monotonic() + 10
        while True:
            status = c.get("/v1/admin/replication", params={"tenant": "acme"}, headers=ADMIN).json()
            done = len(status["results"]) == 2 and status["follower"]["applied"] == 5
            if done or time.monotonic() > deadline:  # the follower applies the log's 5 in its own thread
                break
            time.sleep(0.05)
        erase, ttl = sorted(status["results"].values(), key=lambda v: "ttl" in v)
        assert erase["verified"] and ttl["ttl"] == 30.0  # the worker applied both, as the log gave them
        assert status["follower"]["region"] == "a" and status["follower"]["submitted"] == 5
        assert status["follower"]["applied"] == 5 and status["follower"]["caught_up"]
        metrics = c.get("/metrics").text
        assert 'ctxcache_replication_submitted_total{region="a"} 5.0' in metrics


def test_bad_input_is_a_4xx_in_the_apis_shape(redis_url):
    with serve(lm_on(redis_url), replication={"region": "a"}) as c:
        for method, path, body in [
            ("post", "/v1/admin/cache/invalidate", {"key": "not hex"}),
            ("post", "/v1/admin/cache/invalidate", {"key": "ab" * 65}),
            ("post", "/v1/admin/cache/invalidate", {"keys": "ab"}),
            ("put", "/v1/admin/tenants/acme/ttl", {"ttl": -1}),
            ("put", "/v1/admin/tenants/acme/ttl", {"ttl": "5m"}),
            ("put", "/v1/admin/cache/pins/zz", None),
        ]:
            r = c.request(method.upper(), path, json=body, headers=ADMIN)
            assert r.status_code == 400 and "error" in r.json(), (path, body, r.text)
        assert c.put("/v1/admin/tenants/nobody/ttl", json={"ttl": 5}, headers=ADMIN).status_code == 404
        assert c.post("/v1/admin/cache/invalidate", json={"key": "ab"}).status_code == 401
        assert c.post("/v1/admin/cache/invalidate", json={"key": "ab"},
                      headers={"Authorization": "Bearer sk-acme"}).status_code == 403  # fmt: skip
        assert inbox(redis_url) == []  # nothing bad reached the log


def test_an_unreachable_region_log_is_a_503_after_the_local_erasure(redis_factory):
    server = redis_factory()
    with serve(lm_on(server.url), replication={"region": "a", "timeout_s": 0.3}) as c:
        key = {"Authorization": "Bearer sk-acme"}
        assert c.post("/v1/chat/completions", json=chat("hello " * 40), headers=key).status_code == 200
        server.kill()
        r = c.delete("/v1/admin/tenants/acme/cache", headers=ADMIN)
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "replication_unavailable" and "retry" in err["message"]
        assert c.lm.cache.tenant_usage("acme")["blocks"] == 0  # erased here all the same


def test_without_replication_the_routes_act_locally(redis_url):
    with serve(lm_on(redis_url)) as c:
        r = c.delete("/v1/admin/tenants/acme/cache", headers=ADMIN)
        assert r.status_code == 200 and "replication" not in r.json()
        assert c.get("/v1/admin/replication", headers=ADMIN).status_code == 404
        assert c.post("/v1/admin/cache/invalidate", json={"key": "ab" * 16}, headers=ADMIN).status_code == 200
