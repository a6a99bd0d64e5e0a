"""Server configuration: a TOML file with [server], [cache] and [api_keys] tables, all optional.

```toml
[server]
max_queue = 32            # waiting requests beyond this get 429 + Retry-After
max_context = 8192        # prompt + max_tokens must fit (capped by the model's own limit)
max_tokens_limit = 2048   # the largest max_tokens a request may ask for
default_max_tokens = 256  # OpenAI requests without max_tokens
cache = true              # false: no lookups, no stores (a baseline)
auto_cache = true         # cache full blocks of prompts without cache_control breakpoints
cache_generated = true    # with auto_cache, also cache the reply's full blocks for the next turn
max_pinned_fraction = 0.5 # cache_control pins may hold at most this share of the first tier
max_body_bytes = "2MiB"   # larger request bodies get 413 before they are parsed
keepalive_s = 5.0         # streams quiet this long (a long prefill) get a keep-alive ping
model_aliases = []        # other names requests may use for the served model

[cache]                   # ContextCache config, see docs/configuration.md
block_size = 32
[[cache.tiers]]
kind = "memory"
capacity = "2GiB"

[api_keys]                # key = tenant id (the cache namespace); none: one "default" tenant
"sk-team-a-secret" = "team-a"

[observability]           # see docs/metrics.md
window_s = 600            # the indicators' sliding window
log_every_s = 10          # the periodic stats log line and dashboard point
trace_exporter = "none"   # none | console | memory | otlp (env CTXCACHE_TRACE_EXPORTER)
worker_stall_s = 120      # /readyz fails when one job runs longer
[observability.ab]        # A/B groups: a sticky share of tenants served by another cache
fraction = 0.1
cache = { block_size = 32, tiers = [{ kind = "memory", capacity = "2GiB", policy = "s3fifo" }] }

[semantic]                # semantic response cache, opt-in per tenant: see docs/semantic-cache.md
tenants = ["team-a"]
# [semantic.store]        # shared by several processes (defaults shown; what each costs: the store
# kind = "redis"          # table in docs/semantic-cache.md). Default store: a disk one
# url = "redis://127.0.0.1:6379/0"
# prefix = "ctxsem:"
# sync_interval = 2       # s: another process may serve an entry erased elsewhere this long
# tombstone_linger = 600  # s: a confirmed erasure's tombstone stays in Redis (default max(600, 15 x sync))
# max_pending = 100000    # deletes that may not have landed, kept and retried; past it the oldest is given up
# journal = false         # default: those deletes journaled under ctxcache's home, across a crash

[events]                  # KV events on Redis Streams, see docs/events.md (default: on with a Redis tier)
token_ids = false

[replication]             # metadata shared with other regions, see docs/regions.md (default: off)
region = "eu"             # this region's name; url defaults to the first Redis tier's

[admin]                   # opens every /v1/admin route and the dashboard's tenant table, as do
                          # [cache.tenancy] admin_keys and env CTXCACHE_ADMIN_KEY (any of them);
                          # none configured: admin routes answer 403
key = "admin-secret"
```
"""

from __future__ import annotations

import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..config import load_config, parse_size
from ..errors import ConfigError
from ..observability.service import ObsConfig, obs_config_from

log = logging.getLogger("ctxcache.server")

# Measured with benchmarks/serving/bench_ttft.py (multi-turn chat, 1-3k token histories): see docs/serving.md.
DEFAULT_BLOCK_SIZE = 32
DEFAULT_TIERS: list[dict[str, Any]] = [{"kind": "memory", "capacity": "2GiB", "policy": "lru"}]
DEFAULT_TENANT = "default"


@dataclass
class ServerConfig:
    model_id: str | None = None  # the name served by /v1/models; default: from the model directory
    max_queue: int = 32
    max_context: int = 8192
    max_tokens_limit: int = 2048
    default_max_tokens: int = 256
    cache: bool = True
    auto_cache: bool = True
    cache_generated: bool = True
    max_pinned_fraction: float = 0.5
    max_body_bytes: int | str = 2 << 20
    keepalive_s: float = 5.0  # a quiet stream gets a ping (SSE comment / Anthropic ping) this often
    model_aliases: list[str] = field(default_factory=list)  # more names /v1/models lists and requests may use
    api_keys: dict[str, str] = field(default_factory=dict)
    cache_config: dict[str, Any] = field(default_factory=dict)
    observability: ObsConfig = field(default_factory=ObsConfig)
    semantic: dict[str, Any] = field(default_factory=dict)  # validated by server/routes_semantic.py
    admin: dict[str, Any] = field(default_factory=dict)  # {"key": ...}, see server/routes_admin.py
    events: dict[str, Any] = field(default_factory=dict)  # KV events: docs/events.md (events/runtime.py checks it)
    replication: dict[str, Any] = field(default_factory=dict)  # regions: docs/regions.md (replication/config.py)
    file_cache_keys: frozenset[str] = field(default=frozenset(), init=False, repr=False)

    def __post_init__(self) -> None:
        # Which [cache] keys the file set: without "tiers", `serve` uses its RAM + disk default.
        self.file_cache_keys = frozenset(self.cache_config)
        self.validate()

    def validate(self) -> None:
        """Check every value (again after flags and environment variables changed some)."""
        for name in ("max_queue", "max_context", "max_tokens_limit", "default_max_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"server.{name} must be a positive integer, got {v!r}")
        if self.default_max_tokens > self.max_tokens_limit:
            raise ConfigError(
                f"server.default_max_tokens ({self.default_max_tokens}) exceeds max_tokens_limit ({self.max_tokens_limit})"
            )
        for name in ("cache", "auto_cache", "cache_generated"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"server.{name} must be true or false, got {getattr(self, name)!r}")
        if (
            isinstance(self.keepalive_s, bool)
            or not isinstance(self.keepalive_s, (int, float))
            or not 0 < self.keepalive_s <= 300
        ):
            raise ConfigError(f"server.keepalive_s must be in (0, 300] seconds, got {self.keepalive_s!r}")
        if not isinstance(self.model_aliases, list) or not all(isinstance(a, str) and a for a in self.model_aliases):
            raise ConfigError(f"server.model_aliases must be a list of non-empty strings, got {self.model_aliases!r}")
        if not 0.0 <= self.max_pinned_fraction <= 1.0:
            raise ConfigError(f"server.max_pinned_fraction must be in [0, 1], got {self.max_pinned_fraction!r}")
        try:
            self.max_body_bytes = parse_size(self.max_body_bytes)
        except (ConfigError, TypeError, ValueError) as exc:
            raise ConfigError(f"server.max_body_bytes: {exc}") from None
        if self.max_body_bytes < 1024:
            raise ConfigError(f"server.max_body_bytes must be at least 1KiB, got {self.max_body_bytes}")
        for key, tenant in self.api_keys.items():
            if not isinstance(key, str) or not key or not isinstance(tenant, str) or not tenant:
                raise ConfigError(f"api_keys must map non-empty key strings to tenant ids, got {key!r} = {tenant!r}")
        if len(set(self.api_keys)) != len(self.api_keys):
            raise ConfigError("api_keys has duplicate keys")
        self._check_admin_table()
        from ..events.runtime import EventsConfig

        EventsConfig.from_dict(self.events)  # a bad [events] table fails at startup
        from ..replication.config import ReplicationConfig

        rep = ReplicationConfig.from_dict(self.replication)
        tiers = self.cache_config.get("tiers")  # None: the app's own cache, checked by create_app
        if rep is not None and rep.url is None and tiers is not None and not _has_redis(tiers):
            raise ConfigError('[replication] needs url = "redis://..." (there is no Redis tier to take it from)')
        admin = {os.environ.get("CTXCACHE_ADMIN_KEY"), self.admin.get("key"), self.observability.admin_key}
        shared = sorted({self.api_keys[k] for k in admin & set(self.api_keys) if isinstance(k, str)})
        if shared:  # that tenant would open the admin routes and the dashboard's tenant table
            raise ConfigError(f"an admin key is also an API key of tenant(s) {shared} in [api_keys]")
        cc = dict(self.cache_config)
        cc.setdefault("block_size", DEFAULT_BLOCK_SIZE)
        cc.setdefault("tiers", [dict(t) for t in DEFAULT_TIERS])
        load_config(cc)  # validate now: a bad [cache] table fails at startup, with its own message
        self.cache_config = cc

    def _check_admin_table(self) -> None:
        # At load time: a bad [admin] table must stop the server, not turn each admin call into a 500.
        bad = set(self.admin) - {"key"}
        if bad:
            raise ConfigError(f"unknown [admin] keys {sorted(bad)}; known: ['key']")
        key = self.admin.get("key")
        if key is not None and key != "" and (not isinstance(key, str) or len(key) < 8):
            raise ConfigError("[admin] key must be a string of at least 8 characters")

    def cache_dict(self, model_fingerprint: str) -> dict[str, Any]:
        """The ContextCache config, with the model fingerprint in every namespace unless set."""
        cc = dict(self.cache_config)
        cc.setdefault("model", model_fingerprint)
        return cc


def _has_redis(tiers: Any) -> bool:
    return isinstance(tiers, list) and any(isinstance(t, Mapping) and t.get("kind") == "redis" for t in tiers)


_SERVER_KEYS = {f.name for f in fields(ServerConfig)} - {
    "api_keys",
    "cache_config",
    "observability",
    "semantic",
    "admin",
    "events",
    "replication",
    "file_cache_keys",
}
_TABLES = ["admin", "api_keys", "cache", "events", "observability", "replication", "semantic", "server"]


def load_server_config(source: str | os.PathLike[str] | Mapping[str, Any] | None = None) -> ServerConfig:
    """Read a server config from a TOML path or a dict shaped like it; None gives the defaults."""
    if source is None:
        return ServerConfig()
    if isinstance(source, Mapping):
        data: Mapping[str, Any] = source
    else:
        path = Path(source)
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    unknown = set(data) - set(_TABLES)
    if unknown:
        raise ConfigError(f"unknown config tables {sorted(unknown)}; known: {_TABLES}")
    server = data.get("server", {})
    if not isinstance(server, Mapping):
        raise ConfigError("[server] must be a table")
    bad = set(server) - _SERVER_KEYS
    if bad:
        raise ConfigError(f"unknown [server] keys {sorted(bad)}; known: {sorted(_SERVER_KEYS)}")
    keys = data.get("api_keys", {})
    cache = data.get("cache", {})
    semantic, admin, events = data.get("semantic", {}), data.get("admin", {}), data.get("events", {})
    replication = data.get("replication", {})
    if not all(isinstance(t, Mapping) for t in (keys, cache, semantic, admin, events, replication)):
        raise ConfigError("[api_keys], [cache], [semantic], [admin], [events] and [replication] must be tables")
    obs = obs_config_from(data.get("observability", {}))
    if "admin_key" in data.get("observability", {}):
        log.warning(
            "[observability] admin_key is deprecated: it still opens the dashboard's tenant table, and only that. "
            "Move the key to [admin] key (or [cache.tenancy] admin_keys): those open the dashboard and /v1/admin"
        )
    try:
        return ServerConfig(
            **server,
            api_keys=dict(keys),
            cache_config=dict(cache),
            observability=obs,
            semantic=dict(semantic),
            admin=dict(admin),
            events=dict(events),
            replication=dict(replication),
        )
    except TypeError as exc:
        raise ConfigError(f"[server]: {exc}") from None
