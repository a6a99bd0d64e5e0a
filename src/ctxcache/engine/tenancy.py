"""Tenants: who shares the cache, what each may hold and load, and how its keys are rooted.

A tenant comes from config (``[cache.tenants.<id>]`` tables, TOML or a dict) with environment
overrides (``CTXCACHE_TENANT_<ID>_<FIELD>``, the id upper-cased with ``-`` as ``_``)::

    [cache.tenancy]
    secret = "server-secret"        # or env CTXCACHE_SECRET; roots every tenant's namespace
    max_pinned = "256MiB"           # cap on class-0 (pinned) bytes in each tier; over it: 4xx
    on_throttle = "wait"            # or "recompute": what a load does when the bucket is empty
    [cache.tenants.team-a]
    api_keys = ["sha256:9f86...", "sk-plain-is-hashed-at-load"]
    salt = "team-a-secret"          # the tenant's salt secret, mixed into its namespace root
    quota = { memory = "1GiB", disk = "8GiB" }   # bytes per tier name; absent: no quota
    rate = "200MiB"                 # bytes/s loaded from disk/Redis; burst: the bucket's size
    burst = "400MiB"
    priority = 1                    # 0 system/pinned, 1 SLO, 2 best effort (default)
    ttl = "5m"                      # default block TTL, refreshed on every hit
    weight = 1.0                    # eviction weight: the tenant's share of a tier without quota

Encryption at rest (off by default): ``encrypt = true`` in ``[cache.tenancy]`` with a master key
in ``master_key_file`` or ``CTXCACHE_MASTER_KEY`` (hex or base64, 32+ bytes); see sealing.py.

The namespace root is HMAC-SHA256(server secret, tenant id ‖ tenant salt): derived from the
server's secrets and the configured id, never from anything a client sends. A per-request
``cache_salt`` only narrows sharing further inside the tenant (a separate chain, same owner).
API keys are kept as SHA-256 digests only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError, CtxCacheError
from ..units import parse_duration, parse_size
from .sealing import load_master_key

PRIORITIES = (0, 1, 2)
THROTTLE_MODES = ("wait", "recompute")
_SALT = re.compile(r"^[A-Za-z0-9_.:\-+/=]{1,128}$")
SALT_PATTERN = _SALT.pattern  # the HTTP schemas publish the same rule
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_FIELDS = {"api_keys", "salt", "quota", "rate", "burst", "priority", "ttl", "weight"}
_OPTIONS = {"secret", "max_pinned", "on_throttle", "admin_keys", "max_wait", "encrypt", "master_key_file"}


class UnknownTenantError(CtxCacheError, KeyError):
    """No tenant has this id."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown tenant"


class InvalidSaltError(CtxCacheError, ValueError):
    """A per-request cache_salt is not a short printable token."""


class PinnedQuotaError(CtxCacheError, ValueError):
    """Class-0 (pinned) blocks would exceed the global cap on pinned bytes."""


def key_digest(key: str) -> str:
    """How a configured API key is stored: ``sha256:<hex>`` (a key configured that way is kept as
    is, so a config need not hold the key itself). Never for a key a request sends: see
    ``request_digest``."""
    if key.startswith("sha256:") and len(key) == 71:
        return key.lower()
    return request_digest(key)


def request_digest(key: str) -> str:
    """The digest of a key a request sends: always hashed. Kept as is, a client that had read a
    stored digest (a config file, a backup) could send it instead of the key and be let in."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@dataclass
class Tenant:
    id: str
    key_digests: frozenset[str] = frozenset()
    salt: bytes = b""
    quota: dict[str, int] = field(default_factory=dict)  # tier name -> bytes (0: nothing there)
    rate: float | None = None  # bytes/s from slow tiers; None: unlimited
    burst: int = 0
    priority: int = 2
    ttl: float | None = None
    weight: float = 1.0


@dataclass
class Tenancy:
    tenants: dict[str, Tenant]
    secret: bytes = b""
    max_pinned: int | None = None
    on_throttle: str = "wait"
    max_wait: float = 1.0  # longest a load waits for its bucket before recomputing anyway
    admin_digests: frozenset[str] = frozenset()
    master_key: bytes | None = None  # set: disk and Redis blobs are sealed per tenant (sealing.py)
    _by_key: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for t in self.tenants.values():
            for d in t.key_digests:
                if self._by_key.setdefault(d, t.id) != t.id:
                    raise ConfigError(f"an API key is given to both {self._by_key[d]!r} and {t.id!r}")
        for d in self.admin_digests:  # that tenant would open every admin route, others' data included
            if d in self._by_key:
                raise ConfigError(f"an admin key is also an API key of tenant {self._by_key[d]!r}")

    def get(self, tenant: str) -> Tenant:
        t = self.tenants.get(tenant)
        if t is None:
            raise UnknownTenantError(f"unknown tenant {tenant!r}")
        return t

    def authenticate(self, api_key: str) -> str | None:
        """The tenant an API key belongs to (compared as digests), or None."""
        return self._by_key.get(request_digest(api_key)) if api_key else None

    def root_salt(self, tenant: str, cache_salt: str | None = None) -> bytes:
        """The salt of a tenant's namespace: HMAC of the server secret over id and tenant salt,
        then narrowed by a validated per-request ``cache_salt``."""
        t = self.get(tenant)
        mac = hmac.new(self.secret, b"ctxcache/tenant\0" + t.id.encode() + b"\0" + t.salt, hashlib.sha256).digest()
        if cache_salt is None:
            return mac
        return mac + b"/" + check_salt(cache_salt).encode()

    def priority(self, tenant: str) -> int:
        t = self.tenants.get(tenant)
        return t.priority if t is not None else 2

    def ttl(self, tenant: str) -> float | None:
        t = self.tenants.get(tenant)
        return t.ttl if t is not None else None


def check_salt(salt: object) -> str:
    if not isinstance(salt, str) or not _SALT.match(salt):
        raise InvalidSaltError(
            f"cache_salt must be 1-128 characters of letters, digits and _ . : - + / =, got {salt!r:.40}"
        )
    return salt


def load_tenancy(
    tenants: Mapping[str, Any], options: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> Tenancy | None:
    """Tenancy from the ``tenants`` and ``tenancy`` config tables (None when no tenant is given)."""
    env = os.environ if env is None else env
    options = dict(options or {})
    if not isinstance(tenants, Mapping):
        raise ConfigError("tenants must be a table of [tenants.<id>] tables")
    bad = set(options) - _OPTIONS
    if bad:
        raise ConfigError(f"unknown [tenancy] keys {sorted(bad)}; known: {sorted(_OPTIONS)}")
    if not tenants:
        return None
    parsed = {tid: _tenant(tid, spec, env) for tid, spec in tenants.items()}
    secret = env.get("CTXCACHE_SECRET") or options.get("secret", "")
    if not isinstance(secret, str):
        raise ConfigError("tenancy.secret must be a string")
    mode = options.get("on_throttle", "wait")
    if mode not in THROTTLE_MODES:
        raise ConfigError(f"tenancy.on_throttle must be one of {THROTTLE_MODES}, got {mode!r}")
    admin = options.get("admin_keys", [])
    env_admin = env.get("CTXCACHE_ADMIN_KEY")
    admin = [*admin, env_admin] if env_admin else admin
    if not isinstance(admin, list) or not all(isinstance(k, str) and k for k in admin):
        raise ConfigError("tenancy.admin_keys must be a list of non-empty strings")
    pinned = options.get("max_pinned")
    encrypt = options.get("encrypt", False)
    if not isinstance(encrypt, bool):
        raise ConfigError(f"tenancy.encrypt must be true or false, got {encrypt!r}")
    master = load_master_key(options.get("master_key_file"), env.get("CTXCACHE_MASTER_KEY")) if encrypt else None
    return Tenancy(
        parsed,
        secret=secret.encode(),
        max_pinned=None if pinned is None else _bytes(pinned, "tenancy.max_pinned"),
        on_throttle=mode,
        max_wait=parse_duration(options.get("max_wait", 1.0), "tenancy.max_wait"),
        admin_digests=frozenset(key_digest(k) for k in admin),
        master_key=master,
    )


def _bytes(value: object, what: str) -> int:
    if value == 0 or value == "0":
        return 0
    try:
        return parse_size(value)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def _overrides(tid: str, spec: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    out = dict(spec)
    prefix = "CTXCACHE_TENANT_" + re.sub(r"[^A-Za-z0-9]", "_", tid).upper() + "_"
    for name, value in env.items():
        if name.startswith(prefix):
            f = name[len(prefix) :].lower()
            if f not in _FIELDS - {"quota", "api_keys"}:
                raise ConfigError(f"{name}: tenants can be overridden in {sorted(_FIELDS - {'quota', 'api_keys'})}")
            out[f] = value
    return out


def _tenant(tid: object, spec: object, env: Mapping[str, str]) -> Tenant:
    if not isinstance(tid, str) or not _ID.match(tid):
        raise ConfigError(f"tenant id {tid!r}: 1-64 letters, digits, '_', '.', '-', starting with a letter or digit")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"tenants.{tid} must be a table")
    spec = _overrides(tid, spec, env)
    bad = set(spec) - _FIELDS
    if bad:
        raise ConfigError(f"tenants.{tid}: unknown keys {sorted(bad)}; known: {sorted(_FIELDS)}")
    keys = spec.get("api_keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        raise ConfigError(f"tenants.{tid}.api_keys must be a list of non-empty strings")
    quota = spec.get("quota", {})
    if not isinstance(quota, Mapping):
        raise ConfigError(f"tenants.{tid}.quota must be a table of tier name = size")
    priority = int(spec.get("priority", 2)) if str(spec.get("priority", 2)).isdigit() else -1
    if priority not in PRIORITIES:
        raise ConfigError(f"tenants.{tid}.priority must be 0, 1 or 2, got {spec.get('priority')!r}")
    try:
        weight = float(spec.get("weight", 1.0))
    except (TypeError, ValueError):
        weight = -1.0
    if not 0 < weight < float("inf"):
        raise ConfigError(f"tenants.{tid}.weight must be a positive number, got {spec.get('weight')!r}")
    rate = spec.get("rate")
    rate_b = None if rate is None else float(_bytes(rate, f"tenants.{tid}.rate"))
    burst = _bytes(spec.get("burst", rate if rate is not None else 1), f"tenants.{tid}.burst")
    ttl = spec.get("ttl")
    salt = spec.get("salt", "")
    return Tenant(
        tid,
        frozenset(key_digest(k) for k in keys),
        salt.encode() if isinstance(salt, str) else b"",
        {str(k): _bytes(v, f"tenants.{tid}.quota.{k}") for k, v in quota.items()},
        rate_b if rate_b else None,
        burst,
        priority,
        None if ttl is None else parse_duration(ttl, f"tenants.{tid}.ttl"),
        weight,
    )
