"""/metrics contents, /readyz, request log lines, spans, A/B groups and the dashboard feed."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ctxcache import ContextCache
from ctxcache.observability.ab import ABConfig
from ctxcache.observability.logging import configure
from ctxcache.observability.service import ObsConfig
from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

from .conftest import MODEL, chat
from .fake import FakeLM

SYSTEM = "You are a careful assistant. " * 4


@contextlib.contextmanager
def serve(lm=None, obs=None, **cfg):
    lm = lm or FakeLM()
    app = create_app(lm, ServerConfig(**cfg), model_id=MODEL, obs=obs or ObsConfig(log_every_s=3600))
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as client:
        client.lm, client.app = lm, app
        yield client


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m, name, **labels):
    return m[(name, tuple(sorted(labels.items())))]


def test_metrics_export_the_cache_and_the_indicators():
    with serve() as c:
        for i in range(3):
            assert c.post("/v1/chat/completions", json=chat(f"question {i}", system=SYSTEM)).status_code == 200
        m = samples(c.get("/metrics").text)
    assert value(m, "ctxcache_lookups_total") == 3
    assert value(m, "ctxcache_lookup_hit_tokens_total") > 0
    assert value(m, "ctxcache_tier_blocks", tier="memory", kind="memory") > 0
    assert value(m, "ctxcache_tier_up", tier="memory", kind="memory") == 1
    assert value(m, "ctxcache_evictions_total", reason="capacity") == 0
    assert value(m, "ctxcache_tier_evictions_total", tier="memory", kind="memory") == 0
    assert value(m, "ctxcache_corrupt_blocks_total", tier="memory", kind="memory") == 0
    for g in (
        "ctxcache_hit_rate_slope_percent_per_minute",
        "ctxcache_eviction_entropy_ratio",
        "ctxcache_context_age_skewness",
    ):
        assert (g, ()) in m
    assert value(m, "ctxcache_served_requests_total", ab_group="a") == 3
    hit = value(m, "ctxcache_ab_hit_tokens_total", ab_group="a")
    assert hit == value(m, "ctxcache_lookup_hit_tokens_total") and hit > 0
    assert value(m, "ctxcache_request_hit_tokens_by_tier_total", tier="memory") == hit
    assert value(m, "ctxcache_phase_seconds_count", phase="decode") == 3
    assert value(m, "ctxcache_prefill_saved_seconds_estimated_total", ab_group="a") > 0
    assert value(m, "ctxcache_mover_queue_depth") == 0


def test_evictions_and_entropy_reach_metrics():
    lm = FakeLM(capacity=4096)  # room for ~30 blocks of 128 B: requests evict each other
    with serve(lm, api_keys={"k1": "alice", "k2": "bob"}) as c:
        for i in range(12):
            key = "k1" if i % 2 else "k2"
            r = c.post("/v1/chat/completions", json=chat(f"{i} " * 40), headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200
        m = samples(c.get("/metrics").text)
    ev = value(m, "ctxcache_evictions_total", reason="capacity")
    assert ev > 0 and value(m, "ctxcache_tier_evictions_total", tier="memory", kind="memory") == ev
    assert value(m, "ctxcache_eviction_window_rate") == pytest.approx(ev / 600)
    assert 0.5 < value(m, "ctxcache_eviction_entropy_ratio") <= 1.0  # both tenants lose blocks


def test_corrupt_disk_blocks_are_counted_and_logged(tmp_path):
    lm = FakeLM()
    lm.cache.close()
    lm.cache = ContextCache.from_config(
        {"block_size": 8, "tiers": [{"kind": "disk", "path": str(tmp_path), "capacity": "1MiB"}]}
    )
    buf = io.StringIO()
    configure("INFO", json=True, stream=buf)
    with serve(lm) as c:
        assert c.post("/v1/chat/completions", json=chat("hello", system=SYSTEM)).status_code == 200
        lm.cache.flush()
        files = [p for p in Path(tmp_path).rglob("*") if p.is_file() and p.stat().st_size > 64]
        assert files
        for f in files:
            data = bytearray(f.read_bytes())
            data[-1] ^= 0xFF
            f.write_bytes(bytes(data))
        assert c.post("/v1/chat/completions", json=chat("hello", system=SYSTEM)).status_code == 200
        m = samples(c.get("/metrics").text)
        assert value(m, "ctxcache_corrupt_blocks_total", tier="disk", kind="disk") >= 1
        c.app.state.obs.tick()
        ready = c.get("/readyz").json()
        assert ready["checks"]["tiers"]["disk"]["corrupt_blocks"] >= 1
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    warn = [x for x in lines if x["level"] == "warning" and "corrupt" in x["msg"]]
    assert warn and warn[0]["tier"] == "disk" and warn[0]["corrupt_new"] >= 1
    configure("WARNING", json=False)


def test_readyz_ok_then_names_a_stuck_worker():
    lm = FakeLM()
    lm.gate = threading.Event()
    with serve(lm, obs=ObsConfig(log_every_s=3600, worker_stall_s=0.2)) as c:
        r = c.get("/readyz")
        assert r.status_code == 200 and r.json()["status"] == "ready"
        with httpx.Client(base_url=str(c.base_url), timeout=30) as other:
            t = threading.Thread(target=lambda: other.post("/v1/chat/completions", json=chat("x")))
            t.start()
            deadline = time.monotonic() + 10
            while not c.get("/healthz").json()["busy"] and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.3)
            r = c.get("/readyz")
            assert r.status_code == 503
            body = r.json()
            assert body["status"] == "not ready" and "stuck" in body["problems"][0]
            assert c.get("/healthz").status_code == 200  # liveness still answers
            lm.gate.set()
            t.join()
        # The client has its answer before the model thread finishes the job's after-work (memory trim),
        # and the worker is busy until then: readiness comes back within moments, not necessarily at once.
        deadline = time.monotonic() + 5
        while (code := c.get("/readyz").status_code) != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert code == 200


def test_readyz_names_a_dead_redis_tier(redis_factory):
    server = redis_factory()
    lm = FakeLM()
    lm.cache.close()
    lm.cache = ContextCache.from_config(
        {
            "block_size": 8,
            "tiers": [{"kind": "memory", "capacity": "1MiB"}, {"kind": "redis", "url": server.url, "capacity": "1MiB"}],
        }
    )
    try:
        with serve(lm) as c:
            assert c.post("/v1/chat/completions", json=chat("hi", system=SYSTEM)).status_code == 200
            assert c.get("/readyz").status_code == 200
            server.kill()
            lm.cache.evict_all()  # demotes into the dead redis: the tier notices
            c.post("/v1/chat/completions", json=chat("hi again", system=SYSTEM))
            r = c.get("/readyz")
            assert r.status_code == 503
            assert any("redis" in p and "unreachable" in p for p in r.json()["problems"])
            assert value(samples(c.get("/metrics").text), "ctxcache_tier_up", tier="redis", kind="redis") == 0
    finally:
        lm.cache.close()  # its tier's reconnect thread would log into later tests' output


def test_one_json_log_line_per_request_without_prompt_text():
    buf = io.StringIO()
    configure("INFO", json=True, stream=buf)
    secret = "zebra-plutonium-7781"
    try:
        with serve() as c:
            for _ in range(2):
                assert c.post("/v1/chat/completions", json=chat(secret, system=SYSTEM)).status_code == 200
            c.app.state.obs.tick()
    finally:
        configure("WARNING", json=False)
    text = buf.getvalue()
    assert secret not in text
    lines = [json.loads(x) for x in text.splitlines()]
    reqs = [x for x in lines if x["msg"] == "request"]
    assert len(reqs) == 2
    r = reqs[1]
    assert r["tenant"] == "default" and r["cached_tokens"] > 0 and r["cached_by_tier"] == {"memory": r["cached_tokens"]}
    assert {"lookup_s", "prefill_s", "decode_s", "queue_s"} <= set(r["timings"]) and r["id"] == 2
    stats = [x for x in lines if x["logger"] == "ctxcache.stats"]
    assert stats and stats[0]["msg"].startswith("hit rate") and 0 < stats[0]["hit_ratio"] < 1


def test_configure_rejects_a_bad_level(monkeypatch):
    with pytest.raises(ValueError, match="unknown log level"):
        configure("LOUD")
    monkeypatch.setenv("CTXCACHE_LOG_LEVEL", "debug")
    monkeypatch.setenv("CTXCACHE_LOG_JSON", "1")
    log = configure(stream=io.StringIO())
    assert log.level == 10
    configure("WARNING", json=False)


def test_spans_per_request_with_phases_and_attributes():
    with serve(obs=ObsConfig(log_every_s=3600, trace_exporter="memory")) as c:
        for i in range(2):
            c.post("/v1/chat/completions", json=chat(f"q{i}", system=SYSTEM))
        spans = c.app.state.obs.tracing.memory.get_finished_spans()
    roots = [s for s in spans if s.name == "chat"]
    assert len(roots) == 2
    root = roots[1]
    kids = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    assert [s.name for s in kids] == ["queue", "lookup", "load", "prefill", "store", "decode"]
    assert root.attributes["ab.group"] == "a" and root.attributes["ctxcache.policy"] == "lru"
    assert root.attributes["ctxcache.hit_tokens"] > 0 and root.attributes["ctxcache.tier"] == "memory"
    assert root.attributes["ctxcache.tenant"] == "default"
    for a, b in zip(kids, kids[1:]):
        assert a.end_time <= b.start_time  # laid end to end
    assert root.start_time <= kids[0].start_time and kids[-1].end_time <= root.end_time


def test_ab_groups_are_sticky_and_served_by_their_own_cache():
    keys = {f"key-{i}": f"user-{i}" for i in range(16)}
    alt = {"block_size": 8, "tiers": [{"kind": "memory", "capacity": "1MiB", "policy": "s3fifo"}]}
    obs = ObsConfig(log_every_s=3600, trace_exporter="memory", ab=ABConfig(fraction=0.5, cache=alt))
    with serve(obs=obs, api_keys=keys) as c:
        o = c.app.state.obs
        groups = {u: o.group_for(u) for u in keys.values()}
        assert set(groups.values()) == {"a", "b"}
        for _ in range(2):
            for k in keys:
                assert (
                    c.post("/v1/chat/completions", json=chat("hi", system=SYSTEM), headers={"x-api-key": k}).status_code
                    == 200
                )
        n_b = sum(g == "b" for g in groups.values())
        assert o.alt_caches["b"].stats()["lookups"] == 2 * n_b
        assert c.app.state.ctx.lm.cache.stats()["lookups"] == 2 * (16 - n_b)
        spans = [s for s in o.tracing.memory.get_finished_spans() if s.name == "chat"]
        assert all(s.attributes["ab.group"] == groups[s.attributes["ctxcache.tenant"]] for s in spans)
        m = samples(c.get("/metrics").text)
        assert value(m, "ctxcache_served_requests_total", ab_group="b") == 2 * n_b


def test_dashboard_feed_shows_tenants_to_admins_only():
    with serve(obs=ObsConfig(log_every_s=3600, admin_key="adm-123"), api_keys={"k1": "alice"}) as c:
        c.post("/v1/chat/completions", json=chat("hi"), headers={"x-api-key": "k1"})
        d = c.get("/dashboard/data").json()
        assert d["totals"]["requests"] == 1 and "tenants" not in d and d["admin_configured"]
        r = c.get("/dashboard/data", headers={"X-Admin-Key": "wrong"})
        assert r.status_code == 403 and "admin key" in r.json()["error"]["message"]
        d = c.get("/dashboard/data", headers={"X-Admin-Key": "adm-123"}).json()
        assert d["tenants"][0]["tenant"] == "alice" and d["tenants"][0]["requests"] == 1
        assert c.get("/dashboard").headers["content-type"].startswith("text/html")
