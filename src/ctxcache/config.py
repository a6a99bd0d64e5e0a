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


_SECONDS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_duration(value: float | str, what: str = "duration") -> float:
    """Seconds from a number or a string like "50ms", "30s", "2h", "7d"."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{what} must be seconds or a string like '50ms', '2h', got {value!r}")
    if isinstance(value, str):
        m = _DURATION.match(value.lower())
        if m is None or m.group(2) not in _SECONDS:
            raise ConfigError(f"cannot parse {what} {value!r}: use e.g. 0.05, '50ms', '30s', '2h', '7d'")
        value = float(m.group(1)) * _SECONDS[m.group(2)]
    if not value > 0 or value != value or value == float("inf"):
        raise ConfigError(f"{what} must be positive and finite, got {value!r}")
    return float(value)


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
    promote: bool = True  # copy blocks hit in a slower tier into the top tier
    write_buffer: int = 256 << 20  # RAM that queued writes to disk/redis may hold


_TOP = {"block_size", "hash", "model", "salt", "tiers", "promote", "write_buffer"}
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
    promote = data.get("promote", True)
    if not isinstance(promote, bool):
        raise ConfigError(f"promote must be true or false, got {promote!r}")
    return CacheConfig(
        block_size=bs,
        hash=h,
        model=str(data.get("model", "default")),
        salt=str(data.get("salt", "")),
        tiers=tiers,
        promote=promote,
        write_buffer=parse_size(data.get("write_buffer", 256 << 20)),
    )
