"""The dashboard's admin views (its per-tenant table) open with the same admin keys as /v1/admin,
through the same check, and refuse any other key exactly as /v1/admin refuses it. The old
``[observability] admin_key`` still opens the dashboard (and only it), with a startup warning."""

from __future__ import annotations

import logging

import pytest

from ctxcache.observability.service import ObsConfig
from ctxcache.server.config import load_server_config

from .test_observability import serve
from .test_tenancy_api import ADMIN, cached, key, tenant_lm

NO_OBS_KEY = ObsConfig(log_every_s=3600, admin_key=None)


@pytest.fixture(autouse=True)
def _no_env_admin_key(monkeypatch):
    monkeypatch.delenv("CTXCACHE_ADMIN_KEY", raising=False)


def _refusal(c, k: str) -> tuple[int, dict]:
    r = c.get("/v1/admin/tenants/a/usage", headers=key(k))
    return r.status_code, r.json()


def _tenants(c, headers) -> list[str]:
    r = c.get("/dashboard/data", headers=headers)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["admin"] and d["admin_configured"]
    return [t["tenant"] for t in d["tenants"]]


def test_a_v1_admin_key_opens_the_dashboard_and_tenant_or_wrong_keys_are_refused_alike():
    with serve(tenant_lm(), obs=NO_OBS_KEY) as c:  # admin key: [cache.tenancy] admin_keys = ["adm"]
        cached(c, "sk-a")
        assert c.get("/v1/admin/tenants/a/usage", headers=ADMIN).status_code == 200
        assert _tenants(c, ADMIN) == ["a"]  # before the fix: 200 without the table ("admin": false)
        assert _tenants(c, {"X-Admin-Key": "adm"}) == ["a"]  # the page's own header
        for k in ("sk-a", "not-a-key"):  # a tenant's key, a wrong key
            want = _refusal(c, k)
            assert want[0] == 403 and "admin" in want[1]["error"]["message"]
            for headers in (key(k), {"X-Admin-Key": k}):
                r = c.get("/dashboard/data", headers=headers)
                assert (r.status_code, r.json()) == want
        d = c.get("/dashboard/data").json()  # no key: the public view, as before
        assert not d["admin"] and "tenants" not in d and d["admin_configured"]


def test_the_server_admin_key_opens_the_dashboard_too():
    with serve(tenant_lm(), obs=NO_OBS_KEY, admin={"key": "server-admin-1"}) as c:
        cached(c, "sk-b")
        assert _tenants(c, key("server-admin-1")) == ["b"]


def test_without_any_admin_key_a_sent_key_gets_the_admin_apis_refusal():
    with serve(obs=NO_OBS_KEY) as c:
        want = _refusal(c, "anything")
        assert want[0] == 403 and "disabled" in want[1]["error"]["message"]
        r = c.get("/dashboard/data", headers={"X-Admin-Key": "anything"})
        assert (r.status_code, r.json()) == want
        d = c.get("/dashboard/data").json()
        assert not d["admin"] and not d["admin_configured"]


def test_the_observability_admin_key_still_opens_the_dashboard_only_and_warns_at_startup(tmp_path, caplog):
    path = tmp_path / "server.toml"
    path.write_text('[observability]\nadmin_key = "obs-legacy-key"\n')
    with caplog.at_level(logging.WARNING, logger="ctxcache.server"):
        cfg = load_server_config(path)
    (warning,) = [r.getMessage() for r in caplog.records if "admin_key" in r.getMessage()]
    assert "deprecated" in warning and "[admin] key" in warning
    with serve(tenant_lm(), obs=cfg.observability) as c:
        cached(c, "sk-a")
        assert _tenants(c, {"X-Admin-Key": "obs-legacy-key"}) == ["a"]  # as before
        r = c.get("/v1/admin/tenants/a/usage", headers=key("obs-legacy-key"))  # never an /v1/admin key
        assert r.status_code == 403
        assert _tenants(c, ADMIN) == ["a"]
    caplog.clear()
    path.write_text("[observability]\nwindow_s = 60\n")
    with caplog.at_level(logging.WARNING, logger="ctxcache.server"):
        load_server_config(path)
    assert not [r for r in caplog.records if "admin_key" in r.getMessage()]
