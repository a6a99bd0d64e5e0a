"""Tenancy details the config tests do not state: API keys are kept only as digests whatever their
length, errors name the offending value or tenant (without KeyError's quoting)."""

from __future__ import annotations

import hashlib

import pytest

from ctxcache.engine.tenancy import UnknownTenantError, key_digest, load_tenancy
from ctxcache.errors import ConfigError


def test_a_plain_key_of_a_digests_length_is_still_hashed():
    plain = "k" * 71  # as long as "sha256:" + 64 hex digits, but not a digest
    assert key_digest(plain) == "sha256:" + hashlib.sha256(plain.encode()).hexdigest()
    ty = load_tenancy({"a": {"api_keys": [plain]}}, env={})
    assert ty is not None
    assert plain not in ty.get("a").key_digests and plain not in repr(ty)
    assert ty.authenticate(plain) == "a" and ty.authenticate("sha256:" + plain[7:]) is None


def test_a_digest_is_kept_as_given_only_when_it_has_a_digests_length():
    digest = "sha256:" + hashlib.sha256(b"sk").hexdigest()
    assert key_digest(digest.upper().replace("SHA256:", "sha256:")) == digest
    short = "sha256:abc"  # not a digest: a plain key that happens to start like one
    assert key_digest(short) == "sha256:" + hashlib.sha256(short.encode()).hexdigest()


@pytest.mark.parametrize(("value", "shown"), [(3, "got 3"), ("high", "got 'high'"), (-1, "got -1")])
def test_a_bad_priority_is_named_in_the_error(value, shown):
    with pytest.raises(ConfigError, match=f"tenants.a.priority must be 0, 1 or 2, {shown}"):
        load_tenancy({"a": {"priority": value}}, env={})


def test_an_unknown_tenant_error_names_the_tenant():
    ty = load_tenancy({"a": {}}, env={})
    assert ty is not None
    with pytest.raises(UnknownTenantError) as exc:
        ty.get("nobody")
    assert str(exc.value) == "unknown tenant 'nobody'"  # a KeyError's str() would quote it again
    assert isinstance(exc.value, KeyError)


def test_the_master_key_file_is_read(tmp_path):
    key = bytes(range(32))
    path = tmp_path / "master.key"
    path.write_bytes(key)
    ty = load_tenancy({"a": {}}, {"encrypt": True, "master_key_file": str(path)}, env={})
    assert ty is not None and ty.master_key == key
    env = {"CTXCACHE_MASTER_KEY": (b"\x01" * 32).hex()}  # the file wins over the environment
    ty = load_tenancy({"a": {}}, {"encrypt": True, "master_key_file": str(path)}, env=env)
    assert ty is not None and ty.master_key == key


def test_tenants_that_are_not_a_table_are_a_clear_error():
    with pytest.raises(ConfigError, match=r"tenants must be a table of \[tenants.<id>\] tables"):
        load_tenancy(["a", "b"], env={})  # type: ignore[arg-type]


def test_a_request_sending_a_stored_digest_is_not_let_in():
    """A key may be configured as its digest; a request that sends that digest (read from a config
    file or a backup) instead of the key is refused, for tenant keys and for admin keys."""
    digest = "sha256:" + hashlib.sha256(b"sk-real").hexdigest()
    ty = load_tenancy({"a": {"api_keys": [digest]}}, env={})
    assert ty is not None and ty.authenticate("sk-real") == "a"
    assert ty.authenticate(digest) is None and ty.authenticate(digest.upper().replace("SHA256", "sha256")) is None
