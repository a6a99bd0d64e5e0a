"""Configuration: a dict or a TOML file with the same keys, validated into plain dataclasses.

```toml
block_size = 256
hash = "xxh3"          # or "blake3"
model = "gemma-3-270m" # model fingerprint: part of every namespace
salt = "change-me"     # secret mixed into every namespace
[[tiers]]
kind = "memory"
capacity = "1GiB"
policy = "lru"         # or { name = "lfu-decay", decay = 0.001 }
high = 0.85
low = 0.70
# write = "through"    # disk/redis tiers: queue every store here at once (default: shared
#                      # tiers and a disk right under RAM), or "demote" (only what RAM demotes)
```
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .keys import HASHES
from .units import parse_duration, parse_size

__all__ = ["CacheConfig", "TierConfig", "load_config", "parse_duration", "parse_size"]


@dataclass
class TierConfig:
    kind: str
    capacity: int
    policy: str | dict[str, Any] = "lru"
    high: float = 0.85
    low: float = 0.70
    write: str | None = None  # "through" | "demote"; None: the engine's default for the tier's place
    options: dict[str, Any] = field(default_factory=dict)  # backend-specific keys


@dataclass
class CacheConfig:
    block_size: int = 256
    hash: str = "xxh3"
    model: str = "default"
    salt: str = ""
    tiers: list[TierConfig] = field(default_factory=list)
    promote: bool = True  # copy blocks hit in a slower tier into the top tier
    write_buffer: int = 256 << 20  # RAM that queued writes to disk/redis may hold
    write_lag: float = 1.0  # seconds a write-through copy may wait before stores wait (0: never)
    tenants: dict[str, Any] = field(default_factory=dict)  # [tenants.<id>]: see engine/tenancy.py
    tenancy: dict[str, Any] = field(default_factory=dict)  # [tenancy]: secret, max_pinned, ...
    erasure_journal: str | None = None  # a local file of erasures not verified yet (engine/journal.py)


_TOP = {
    "block_size",
    "hash",
    "model",
    "salt",
    "tiers",
    "promote",
    "write_buffer",
    "write_lag",
    "tenants",
    "tenancy",
    "erasure_journal",
}
_TIER = {"kind", "capacity", "policy", "high", "low", "name", "write"}
_WRITES = ("through", "demote")


def load_config(source: Mapping[str, Any] | str | os.PathLike[str]) -> CacheConfig:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            with path.open("rb") as f:
                data: Mapping[str, Any] = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    elif isinstance(source, Mapping):
        data = source
    else:
        raise ConfigError(f"config must be a mapping or a TOML path, not {type(source).__name__}")
    unknown = set(data) - _TOP
    if unknown:
        raise ConfigError(f"unknown config keys {sorted(unknown)}; known: {sorted(_TOP)}")
    bs = data.get("block_size", 256)
    if not isinstance(bs, int) or isinstance(bs, bool) or bs < 1:
        raise ConfigError(f"block_size must be a positive integer, got {bs!r}")
    h = data.get("hash", "xxh3")
    if h not in HASHES:
        raise ConfigError(f"unknown hash {h!r}; known: {', '.join(HASHES)}")
    tiers_raw = data.get("tiers", [{"kind": "memory", "capacity": "1GiB"}])
    if not isinstance(tiers_raw, list) or not tiers_raw:
        raise ConfigError("tiers must be a non-empty list of tables")
    tiers = [_tier(i, t) for i, t in enumerate(tiers_raw)]
    promote = data.get("promote", True)
    if not isinstance(promote, bool):
        raise ConfigError(f"promote must be true or false, got {promote!r}")
    tenants, tenancy = data.get("tenants", {}), data.get("tenancy", {})
    if not isinstance(tenants, Mapping) or not isinstance(tenancy, Mapping):
        raise ConfigError("tenants and tenancy must be tables")
    journal = data.get("erasure_journal")
    if journal is not None and not isinstance(journal, str):
        raise ConfigError(f"erasure_journal must be a file path, got {journal!r}")
    return CacheConfig(
        tenants=dict(tenants),
        tenancy=dict(tenancy),
        block_size=bs,
        hash=h,
        model=str(data.get("model", "default")),
        salt=str(data.get("salt", "")),
        tiers=tiers,
        promote=promote,
        write_buffer=parse_size(data.get("write_buffer", 256 << 20)),
        write_lag=_write_lag(data.get("write_lag", 1.0)),
        erasure_journal=journal,
    )


def _write_lag(value: object) -> float:
    """Seconds, or 0 / "0s" / false to never make stores wait for the write-through queue."""
    if value is False or value == 0 or value in ("0", "0s", "0ms"):
        return 0.0
    return parse_duration(value, "write_lag")  # type: ignore[arg-type]


def _tier(i: int, t: object) -> TierConfig:
    if not isinstance(t, Mapping) or "kind" not in t or "capacity" not in t:
        raise ConfigError(f"tiers[{i}] needs at least 'kind' and 'capacity', got {t!r}")
    write = t.get("write")
    if write is not None and write not in _WRITES:
        raise ConfigError(f'tiers[{i}] ({t["kind"]}): write must be "through" or "demote", got {write!r}')
    tc = TierConfig(
        kind=str(t["kind"]),
        capacity=parse_size(t["capacity"]),
        policy=t.get("policy", "lru"),
        high=float(t.get("high", 0.85)),
        low=float(t.get("low", 0.70)),
        write=write,
        options={k: v for k, v in t.items() if k not in _TIER},
    )
    if "name" in t:
        tc.options["name"] = str(t["name"])
    return tc
