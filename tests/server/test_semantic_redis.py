"""The semantic cache on a Redis store behind the server: a tenant's erasure answers ``verified:
false`` while a Redis delete may not have landed (the KV erasure's contract), and true once the
kept delete is retried; the failed deletes are journaled under ctxcache's home by default."""

from __future__ import annotations

import os
import signal

import httpx
from fastapi import FastAPI

from ctxcache.server import ServerConfig, create_app
from ctxcache.server.testing import LiveServer

from .fake import FakeLM
from .test_semantic import ADMIN, KEYS, ask

ERASE = "/v1/admin/semantic/tenants/team-a/entries"


def redis_semantic_app(url: str, prefix: str) -> FastAPI:
    """A server whose semantic cache (tenant team-a, hashing embedder) stores entries on Redis."""
    store = {"kind": "redis", "url": url, "prefix": prefix}
    cfg = ServerConfig(api_keys=KEYS, semantic={"tenants": ["team-a"], "embedder": "hashing", "store": store},
                       admin={"key": "admin-secret-1"})  # fmt: skip
    return create_app(FakeLM(), cfg, model_id="fake-model")


def test_tenant_erasure_is_unverified_while_a_redis_delete_is_pending(redis_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("CTXCACHE_HOME", str(tmp_path / "home"))
    server = redis_factory()
    app = redis_semantic_app(server.url, "api:")
    tier = app.state.semantic._store.tier
    with LiveServer(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        assert ask(c, "What is the capital of France?").headers["x-ctxcache-semantic-cache"] == "miss"
        assert tier.wait_ready(5) and server.client().dbsize() == 1
        os.kill(server.proc.pid, signal.SIGSTOP)  # hung: the delete times out, nothing is answered
        try:
            r = c.delete(ERASE, headers=ADMIN)
        finally:
            os.kill(server.proc.pid, signal.SIGCONT)
        assert r.status_code == 200, r.text
        assert r.json() == {"tenant": "team-a", "erased": 1, "found_in_storage": 0, "pending_deletes": 1,
                            "verified": False}  # fmt: skip
        assert list((tmp_path / "home" / "semantic" / "fake-model").glob("redis-*.pending-deletes"))
        assert tier.wait_ready(5)
        again = c.delete(ERASE, headers=ADMIN).json()
        assert again["verified"] is True and again["pending_deletes"] == 0
        stats = c.get("/v1/admin/semantic/stats", headers=ADMIN).json()
        assert stats["entries"] == 0 and stats["failed_deletes"] == 1 and stats["retried_deletes"] == 1
        assert server.client().keys("api:*") == []  # ctxtomb@api: lingers a few sync periods (tombstones.py)
        assert not list((tmp_path / "home" / "semantic" / "fake-model").glob("redis-*"))
