"""Replicated metadata updates and their wire form.

Blocks themselves are never replicated: they are immutable and content-addressed, so two regions
never disagree about a block's bytes. What changes is the metadata around them, one update at a
time, each on one key with that key's sparse clock:

    key                    kinds
    t:<tenant>             erase_tenant (an effect), ttl (a register: seconds or None)
    p:<block key hex>      invalidate (an effect: the block and its subtree), pin (a register)
    s:<entry id hex>       sem_erase (an effect), sem_feedback (a register: correct or wrong)

``at`` is the origin's wall time when the update was made. It feeds the lag metric only and
never a rule, so wall-clock skew between regions changes no outcome.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .clock import SparseClock, get_str, get_varint, put_str, put_varint

KINDS = ("erase_tenant", "ttl", "invalidate", "pin", "sem_erase", "sem_feedback")
KIND_PREFIX = {"erase_tenant": "t", "ttl": "t", "invalidate": "p", "pin": "p", "sem_erase": "s", "sem_feedback": "s"}
EFFECTS = frozenset({"erase_tenant", "invalidate", "sem_erase"})  # applied once, on delivery
FIELD = {"erase_tenant": "erase", "invalidate": "erase", "sem_erase": "erase", "ttl": "ttl", "pin": "pin",
         "sem_feedback": "fb"}  # fmt: skip
VERSION = 1
REGION = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
HEX = re.compile(r"^[0-9a-f]{2,128}$")
TENANT = re.compile(r"^[^\x00-\x1f]{1,256}$")


def check_region(name: str) -> str:
    if not isinstance(name, str) or not REGION.match(name):
        raise ConfigError(f"region name must be 1-64 of [A-Za-z0-9._-], got {name!r}")
    return name


def tenant_key(tenant: str) -> str:
    if not isinstance(tenant, str) or not TENANT.match(tenant):
        raise ValueError(f"tenant must be 1-256 printable characters, got {tenant!r}")
    return f"t:{tenant}"


def prefix_key(block_key: bytes | str) -> str:
    h = block_key.hex() if isinstance(block_key, bytes | bytearray) else str(block_key).lower()
    if not HEX.match(h):
        raise ValueError(f"a block key is 1-64 bytes (hex), got {block_key!r}")
    return f"p:{h}"


def entry_key(entry_id: bytes | str) -> str:
    h = entry_id.hex() if isinstance(entry_id, bytes | bytearray) else str(entry_id).lower()
    if not HEX.match(h):
        raise ValueError(f"a semantic entry id is 1-64 bytes (hex), got {entry_id!r}")
    return f"s:{h}"


def key_for(kind: str, target: str | bytes) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown update kind {kind!r}; one of {', '.join(KINDS)}")
    p = KIND_PREFIX[kind]
    if p == "t":
        return tenant_key(str(target))
    return prefix_key(target) if p == "p" else entry_key(target)


def check_value(kind: str, value: Any) -> Any:
    """The one place a value's type is checked: bad input is refused before it is stamped."""
    if kind == "ttl":
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < float(value) < 1e12:
            raise ValueError(f"ttl must be a positive number of seconds or None, got {value!r}")
        return float(value)
    if kind in ("pin", "sem_feedback"):
        if not isinstance(value, bool):
            raise ValueError(f"{kind} takes true or false, got {value!r}")
        return value
    if value is not None:
        raise ValueError(f"{kind} takes no value, got {value!r}")
    return None


@dataclass(frozen=True)
class Update:
    origin: str
    key: str
    kind: str
    value: Any
    clock: SparseClock
    at: float = 0.0

    @property
    def uid(self) -> str:
        """Unique in the deployment: the origin's counter on this key names one update."""
        return f"{self.origin}/{self.clock.get(self.origin)}/{self.key}"

    @property
    def field(self) -> str:
        return FIELD[self.kind]

    @property
    def target(self) -> str:
        return self.key[2:]

    def encode(self) -> bytes:
        out = bytearray((VERSION, KINDS.index(self.kind)))
        put_str(out, self.origin)
        put_str(out, self.key)
        v = self.value
        if v is None:
            out.append(0)
        elif isinstance(v, bool):
            out.append(2 if v else 1)
        else:
            out.append(3)
            out += struct.pack(">d", v)
        put_varint(out, max(0, int(self.at * 1000)))
        self.clock.encode(out)
        return bytes(out)

    @classmethod
    def decode(cls, buf: bytes) -> Update:
        try:
            if len(buf) < 2 or buf[0] != VERSION or buf[1] >= len(KINDS):
                raise ValueError("unknown version or kind")
            kind = KINDS[buf[1]]
            origin, pos = get_str(buf, 2)
            key, pos = get_str(buf, pos)
            tag = buf[pos]
            pos += 1
            value: Any
            if tag == 0:
                value = None
            elif tag in (1, 2):
                value = tag == 2
            elif tag == 3:
                (value,) = struct.unpack_from(">d", buf, pos)
                pos += 8
            else:
                raise ValueError(f"value tag {tag}")
            ms, pos = get_varint(buf, pos)
            clock, pos = SparseClock.decode(buf, pos)
            if pos != len(buf):
                raise ValueError("trailing bytes")
            check_region(origin)
            if key[:2] != KIND_PREFIX[kind] + ":" or clock.get(origin) < 1:
                raise ValueError("key or clock does not fit the kind and origin")
            return cls(origin, key, kind, check_value(kind, value), clock, ms / 1000)
        except (IndexError, UnicodeDecodeError, struct.error, ConfigError) as exc:
            raise ValueError(f"bad update: {exc}") from None
