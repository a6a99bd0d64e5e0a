"""Tenants from config, namespaces, isolation on every tier kind, quotas on every tier, priority."""

from __future__ import annotations

import hashlib

import pytest

from ctxcache.engine.tenancy import InvalidSaltError, UnknownTenantError, key_digest, load_tenancy
from ctxcache.errors import ConfigError

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of

TWO = {"a": {"api_keys": ["sk-a"]}, "b": {"api_keys": ["sk-b"]}}


def test_tenants_from_config_with_hashed_keys_and_env_overrides():
    digest = "sha256:" + hashlib.sha256(b"sk-b").hexdigest()
    env = {"CTXCACHE_TENANT_TEAM_A_TTL": "1h", "CTXCACHE_TENANT_TEAM_A_PRIORITY": "1", "CTXCACHE_SECRET": "s"}
    ty = load_tenancy(
        {
            "team-a": {"api_keys": ["sk-a"], "quota": {"memory": "1MiB", "disk": 0}, "ttl": "5m"},
            "b": {"api_keys": [digest]},
        },
        {"max_pinned": "1KiB", "admin_keys": ["adm"]},
        env=env,
    )
    assert ty is not None
    a = ty.get("team-a")
    assert a.ttl == 3600.0 and a.priority == 1  # the environment wins
    assert a.quota == {"memory": 1 << 20, "disk": 0}
    assert "sk-a" not in repr(ty) and all(d.startswith("sha256:") for d in a.key_digests)
    assert ty.authenticate("sk-a") == "team-a" and ty.authenticate("sk-b") == "b"
    assert ty.authenticate("sk-c") is None and ty.authenticate("") is None
    assert ty.admin_digests == {key_digest("adm")}  # server/routes_admin.py's require_admin reads them
    assert ty.secret == b"s" and ty.max_pinned == 1024


@pytest.mark.parametrize(
    ("tenants", "message"),
    [
        ({"a": {"priority": 3}}, "priority"),
        ({"a": {"quota": {"memory": -1}}}, "quota"),
        ({"a": {"weight": 0}}, "weight"),
        ({"a": {"ttl": "soon"}}, "ttl"),
        ({"a b": {}}, "tenant id"),
        ({"a": {"colour": "red"}}, "unknown keys"),
        ({"a": {"api_keys": ["k"]}, "b": {"api_keys": ["k"]}}, "both"),
    ],
)
def test_bad_tenant_config_is_a_clear_error(tenants, message):
    with pytest.raises(ConfigError, match=message):
        load_tenancy(tenants, env={})


def test_an_admin_key_that_is_also_a_tenant_key_is_refused():
    with pytest.raises(ConfigError, match="admin key is also an API key of tenant 'a'"):
        load_tenancy({"a": {"api_keys": ["k"]}}, {"admin_keys": ["k"]}, env={})
    with pytest.raises(ConfigError, match="admin key"):
        load_tenancy({"a": {"api_keys": ["k"]}}, env={"CTXCACHE_ADMIN_KEY": "k"})


def test_namespace_root_comes_from_the_server_secret_not_the_client(tmp_path):
    one = cache_with([tier_of("memory", tmp_path)], TWO, secret="one")
    two = cache_with([tier_of("memory", tmp_path)], TWO, secret="two")
    assert one.namespace("a").root != two.namespace("a").root  # same id, other server: other root
    assert one.namespace("a").root != one.namespace("b").root
    with pytest.raises(UnknownTenantError):
        one.namespace("nobody")
    with pytest.raises(InvalidSaltError):
        one.prompt([1] * BS, "a", cache_salt="bad salt with spaces")
    with pytest.raises(InvalidSaltError):
        one.prompt([1] * BS, "a", cache_salt="")


def test_cache_salt_narrows_sharing_inside_a_tenant(tmp_path):
    cache = cache_with([tier_of("memory", tmp_path)], TWO)
    p = prompt_of(1)
    assert ask(cache, "a", p, "s1") == 0
    assert ask(cache, "a", p, "s1") == len(p)
    assert ask(cache, "a", p, "s2") == 0  # another salt: another chain
    assert ask(cache, "a", p) == 0
    assert cache.tenant_usage("a")["blocks"] == 12  # all three chains are charged to tenant a


@pytest.mark.parametrize("kind", ["memory", "memory-warm", "disk", "redis"])
def test_isolation_on_every_tier_kind(kind, tmp_path, request):
    """Tenant a's repeated prompt hits, tenant b's identical prompt misses, served from each kind."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    tiers = [tier_of(kind, tmp_path, url)]
    if kind in ("disk", "redis"):  # a slow tier under RAM: the hit must come from the slow tier
        tiers.insert(0, tier_of("memory", tmp_path, capacity=BS * 4 * 64))
    cache = cache_with(tiers, TWO)
    p = prompt_of(7)
    assert ask(cache, "a", p) == 0
    if len(tiers) == 2:
        with cache._engine.lock:  # demote everything into the slow tier
            cache._engine.placement.make_room(0, cache.slots[0].used())
        cache.flush()
        assert cache.slots[1].tenant_used("a") > 0 and cache.slots[0].tenant_used("a") == 0
    m = cache.lookup(cache.prompt(p, "a"))
    assert m.hit_tokens == len(p) and set(m.usage.by_tier) == {cache.slots[-1].name}
    cache.release(m)
    assert ask(cache, "b", p) == 0  # the same tokens under tenant b: nothing shared
    assert ask(cache, "a", p) == len(p)
    cache.close()
