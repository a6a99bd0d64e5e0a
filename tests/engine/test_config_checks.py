"""Configuration checks mutation testing found unchecked (docs/testing.md): the [tenancy] table
reaches the cache built from a config, an empty admin key is refused, a master key given as text
must be well-formed, and an unknown [tenancy] key is named."""

from __future__ import annotations

import base64

import pytest

from ctxcache import ContextCache
from ctxcache.engine.sealing import load_master_key
from ctxcache.engine.tenancy import load_tenancy
from ctxcache.errors import ConfigError


def test_the_tenancy_table_reaches_a_cache_built_from_config():
    cache = ContextCache.from_config(
        {"block_size": 4, "tenants": {"a": {"api_keys": ["k"]}}, "tenancy": {"max_pinned": "1KiB", "secret": "s"}}
    )
    ty = cache._engine.tenancy
    assert ty is not None and ty.max_pinned == 1024 and ty.secret == b"s"


def test_an_empty_admin_key_is_refused():
    # "" would make every request that sends an empty key an administrator.
    with pytest.raises(ConfigError, match="admin_keys must be a list of non-empty strings"):
        load_tenancy({"a": {"api_keys": ["k"]}}, {"admin_keys": [""]}, env={})


def test_an_unknown_tenancy_key_is_named_with_the_known_ones():
    with pytest.raises(ConfigError, match=r"unknown \[tenancy\] keys \['colour'\]; known: \['admin_keys'"):
        load_tenancy({"a": {}}, {"colour": "red"}, env={})


def test_a_master_key_in_base64_must_be_well_formed():
    good = base64.b64encode(bytes(range(32))).decode()
    assert load_master_key(None, good) == bytes(range(32))
    with pytest.raises(ConfigError, match="must be hex or base64"):
        load_master_key(None, good[:20] + "!" + good[20:])  # not silently dropped


def test_quota_and_api_keys_cannot_come_from_the_environment():
    # Env overrides are for scalar fields; a quota table or key list in one variable is refused.
    for field in ("QUOTA", "API_KEYS"):
        with pytest.raises(
            ConfigError, match=r"CTXCACHE_TENANT_A_.*: tenants can be overridden in \['burst', 'priority'"
        ):
            load_tenancy({"a": {}}, env={f"CTXCACHE_TENANT_A_{field}": "x"})
