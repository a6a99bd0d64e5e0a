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
```
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .keys import HASHES

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | str) -> int:
    """Bytes from an int or a string like "512MiB", "1.5GB", "4096"."""
    if isinstance(value, bool):
        raise ConfigError(f"size must be bytes or a string like '512MiB', got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ConfigError(f"size must be positive, got {value}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"size must be bytes or a string like '512MiB', got {value!r}")
    m = _SIZE.match(value)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ConfigError(f"cannot parse size {value!r}: use e.g. 1048576, '512MiB', '2GB'")
    n = int(float(m.group(1)) * _UNITS[unit])
    if n <= 0:
        raise ConfigError(f"size must be positive, got {value!r}")
    return n


@dataclass
class TierConfig:
    kind: str
    capacity: int
    policy: str | dict[str, Any] = "lru"
    high: float = 0.85
    low: float = 0.70
    options: dict[str, Any] = field(default_factory=dict)  # backend-specific keys


@dataclass
class CacheConfig:
    block_size: int = 256
    hash: str = "xxh3"
    model: str = "default"
    salt: str = ""
    tiers: list[TierConfig] = field(default_factory=list)


_TOP = {"block_size", "hash", "model", "salt", "tiers"}
_TIER = {"kind", "capacity", "policy", "high", "low", "name"}


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
    tiers = []
    for i, t in enumerate(tiers_raw):
        if not isinstance(t, Mapping) or "kind" not in t or "capacity" not in t:
            raise ConfigError(f"tiers[{i}] needs at least 'kind' and 'capacity', got {t!r}")
        opts = {k: v for k, v in t.items() if k not in _TIER}
        tc = TierConfig(
            kind=str(t["kind"]),
            capacity=parse_size(t["capacity"]),
            policy=t.get("policy", "lru"),
            high=float(t.get("high", 0.85)),
            low=float(t.get("low", 0.70)),
            options=opts,
        )
        if "name" in t:
            tc.options["name"] = str(t["name"])
        tiers.append(tc)
    return CacheConfig(
        block_size=bs,
        hash=h,
        model=str(data.get("model", "default")),
        salt=str(data.get("salt", "")),
        tiers=tiers,
    )
