"""EntryStore: the semantic cache's persistence, on a storage tier (disk or Redis) or in RAM.

The tier does the durable work (atomic, checksummed blocks; see tiers/disk.py and tiers/redis.py);
this adapter only adds what the cache needs on top: iterate every stored entry at start-up. The
tier's own capacity is set far above the cache's (the cache accounts bytes and evicts itself).
Redis entries are listed with SCAN over the tier's key prefix, so a restarted process (or another
one) sees entries it did not write.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from ..errors import ConfigError, TierUnavailableError
from ..tiers import DiskTier, MemoryTier, RedisTier, Tier

_UNBOUNDED = 1 << 62


class EntryStore:
    def __init__(self, tier: Tier) -> None:
        if tier.kind not in ("disk", "redis", "memory"):
            raise ConfigError(f"the semantic cache stores entries in a disk, redis or memory tier, not {tier.kind!r}")
        self.tier = tier

    @classmethod
    def disk(cls, path: str | os.PathLike[str], *, fsync: bool = True) -> EntryStore:
        return cls(DiskTier(_UNBOUNDED, "fifo", path=path, fsync=fsync, name="semantic"))

    @classmethod
    def redis(cls, url: str, *, prefix: str = "ctxsem:", **kw: Any) -> EntryStore:
        return cls(RedisTier(_UNBOUNDED, "fifo", url=url, prefix=prefix, name="semantic", **kw))

    @classmethod
    def memory(cls) -> EntryStore:
        """Not persistent: for tests and throwaway caches."""
        return cls(MemoryTier(_UNBOUNDED, "fifo", mode="warm", name="semantic"))

    @classmethod
    def from_config(cls, spec: dict[str, Any]) -> EntryStore:
        kind = spec.get("kind", "disk")
        if kind == "disk":
            if "path" not in spec:
                raise ConfigError("a semantic disk store needs a 'path'")
            return cls.disk(spec["path"], fsync=bool(spec.get("fsync", True)))
        if kind == "redis":
            return cls.redis(
                str(spec.get("url", "redis://127.0.0.1:6379/0")), prefix=str(spec.get("prefix", "ctxsem:"))
            )
        if kind == "memory":
            return cls.memory()
        raise ConfigError(f"semantic store kind must be disk, redis or memory, not {kind!r}")

    def size(self, payload: Any) -> int:
        return self.tier.size_of(payload)

    def put(self, key: bytes, payload: Any) -> int:
        return self.tier.put(key, payload)

    def get(self, key: bytes) -> Any | None:
        return self.tier.get(key)

    def delete(self, key: bytes) -> bool:
        try:
            return self.tier.delete(key)
        except TierUnavailableError:
            # Redis down: the entry stays stored and nothing here retries it; the caller sees
            # False, as it did before Redis deletes raised.
            return False

    def nbytes(self, key: bytes) -> int:
        return self.tier.nbytes(key)

    def keys(self) -> list[bytes]:
        if isinstance(self.tier, RedisTier):
            return self._redis_keys(self.tier)
        return [k for k in self.tier.keys() if isinstance(k, bytes)]  # noqa: SIM118 (a Tier is not iterable)

    @staticmethod
    def _redis_keys(tier: RedisTier) -> list[bytes]:
        client, prefix = tier._client, tier.prefix  # the tier owns the connection; SCAN is read-only
        if client is None or not tier.healthy or tier.masters_down:  # a down master would fail the SCAN
            return []
        n, pattern = len(prefix), re.sub(rb"([*?\[\]\\])", rb"\\\1", prefix) + b"*"
        return [bytes(k[n:]) for k in client.scan_iter(match=pattern, count=1000)]

    def items(self) -> Iterator[tuple[bytes, Any]]:
        for key in self.keys():
            payload = self.get(key)
            if payload is not None:
                yield key, payload

    def close(self) -> None:
        self.tier.close()
