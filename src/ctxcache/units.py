"""Units shared by the config, the tiers and the server: sizes, durations, and the clock type.

A leaf module (it imports only ``errors``), so storage tiers can parse their own options
("50ms", "512MiB") without depending on the configuration schema.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .errors import ConfigError

Clock = Callable[[], float]
"""Seconds from an arbitrary origin, monotonic (``time.monotonic`` by default). Everything that
reads time takes one, so tests and the trace simulator can drive it."""

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
