"""EntryStore: the semantic cache's persistence, on a storage tier (disk or Redis) or in RAM.

The tier does the durable work (atomic, checksummed blocks; see tiers/disk.py and tiers/redis.py);
this adapter only adds what the cache needs on top: iterate every stored entry at start-up. The
tier's own capacity is set far above the cache's (the cache accounts bytes and evicts itself).
Redis entries are listed with SCAN over the tier's key prefix, so a restarted process (or another
one) sees entries it did not write.

A delete that may not have landed (Redis down, a timeout, a refusal; a disk unlink that failed)
is not dropped: the key joins ``pending`` (see pending.py), is retried on later operations (at
most every ``retry_interval`` seconds), at start-up and at close, and is left out when entries
are listed, so an erased entry is never indexed again, by this process or (with a journal) the
next one.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ConfigError, TierUnavailableError
from ..tiers import DiskTier, MemoryTier, RedisTier, Tier
from .pending import PendingDeletes

_UNBOUNDED = 1 << 62
_BATCH = 256  # pending deletes sent in one round trip
log = logging.getLogger("ctxcache.semantic")


class EntryStore:
    def __init__(
        self,
        tier: Tier,
        *,
        journal: str | os.PathLike[str] | None = None,
        max_pending: int = 100_000,
        retry_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ConfigError(f"semantic store: max_pending must be a positive number of deletes, got {max_pending!r}")
        if tier.kind not in ("disk", "redis", "memory"):
            raise ConfigError(f"the semantic cache stores entries in a disk, redis or memory tier, not {tier.kind!r}")
        self.tier = tier
        try:
            self.pending = PendingDeletes(journal, limit=max_pending)
        except OSError as exc:
            raise ConfigError(f"semantic store: cannot read the pending-delete journal: {exc}") from None
        self.retry_interval, self._clock, self._retry_at = retry_interval, clock, 0.0
        self._lock = threading.Lock()  # guards ``pending``; held across a retry so a put cannot interleave

    @classmethod
    def disk(cls, path: str | os.PathLike[str], *, fsync: bool = True) -> EntryStore:
        return cls(DiskTier(_UNBOUNDED, "fifo", path=path, fsync=fsync, name="semantic"))

    @classmethod
    def redis(
        cls,
        url: str,
        *,
        prefix: str = "ctxsem:",
        journal: str | os.PathLike[str] | None = None,
        max_pending: int = 100_000,
        **kw: Any,
    ) -> EntryStore:
        """``journal``: a local file that keeps failed deletes across a restart (None: memory only,
        so an entry erased while Redis was unreachable may come back after a crash)."""
        tier = RedisTier(_UNBOUNDED, "fifo", url=url, prefix=prefix, name="semantic", **kw)
        try:
            return cls(tier, journal=journal, max_pending=max_pending)
        except ConfigError:
            tier.close()  # its reconnect thread would outlive the refusal
            raise

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
            journal = None if spec.get("journal") is None else str(spec["journal"])
            return cls.redis(
                str(spec.get("url", "redis://127.0.0.1:6379/0")), prefix=str(spec.get("prefix", "ctxsem:")),
                journal=journal, max_pending=spec.get("max_pending", 100_000),
            )  # fmt: skip
        if kind == "memory":
            return cls.memory()
        raise ConfigError(f"semantic store kind must be disk, redis or memory, not {kind!r}")

    def size(self, payload: Any) -> int:
        return self.tier.size_of(payload)

    def put(self, key: bytes, payload: Any) -> int:
        if key in self.pending:  # stored again after an erase: the old delete must not take the new record
            with self._lock:
                written = self.tier.put(key, payload)
                self.pending.discard([key], confirmed=False)  # only once written: else the old record stays
                return written
        self.retry()
        return self.tier.put(key, payload)

    def get(self, key: bytes) -> Any | None:
        return self.tier.get(key)

    def delete(self, key: bytes) -> bool:
        """True if the record was there and is gone. A delete that may not have landed is kept in
        ``pending`` (and retried) before this returns False."""
        self.retry()
        try:
            return self.tier.delete(key)
        except (TierUnavailableError, OSError) as exc:
            with self._lock:
                self.pending.add([key])
            log.warning("semantic store: delete of %s failed, kept for retry: %s", key.hex(), exc)
            return False

    def retry(self, *, force: bool = False) -> int:
        """Send the pending deletes again (unless the last try was under ``retry_interval`` ago and
        not ``force``); returns how many landed."""
        if not len(self.pending) or (not force and self._clock() < self._retry_at):
            return 0
        with self._lock:
            if not force and self._clock() < self._retry_at:
                return 0  # another thread took this turn while we waited for the lock
            self._retry_at = self._clock() + self.retry_interval
            keys, done = self.pending.keys(), []
            for i in range(0, len(keys), _BATCH):
                try:
                    self.tier.delete_many(keys[i : i + _BATCH])
                except (TierUnavailableError, OSError):
                    break  # any of the batch may have failed: all of it stays
                done += keys[i : i + _BATCH]
            self.pending.discard(done)
        return len(done)

    def settled(self, keys: list[bytes] | None = None) -> bool:
        """After a forced retry: none of ``keys`` (None: no key at all) has a delete pending."""
        self.retry(force=True)
        with self._lock:
            return not len(self.pending) if keys is None else not any(k in self.pending for k in keys)

    @property
    def reachable(self) -> bool:
        return not isinstance(self.tier, RedisTier) or self.tier.healthy

    def nbytes(self, key: bytes) -> int:
        return self.tier.nbytes(key)

    def keys(self) -> list[bytes]:
        return self.scan() or []

    def scan(self) -> list[bytes] | None:
        """Every stored key but those with a delete pending; None when the store cannot be listed."""
        if isinstance(self.tier, RedisTier):
            found = self._redis_keys(self.tier)
        else:
            found = [k for k in self.tier.keys() if isinstance(k, bytes)]  # noqa: SIM118 (a Tier is not iterable)
        if found is None:
            return None
        with self._lock:
            return [k for k in found if k not in self.pending]

    @staticmethod
    def _redis_keys(tier: RedisTier) -> list[bytes] | None:
        client, prefix = tier._client, tier.prefix  # the tier owns the connection; SCAN is read-only
        if client is None or not tier.healthy or tier.masters_down:  # a down master would fail the SCAN
            return None
        n, pattern = len(prefix), re.sub(rb"([*?\[\]\\])", rb"\\\1", prefix) + b"*"
        try:
            return [bytes(k[n:]) for k in client.scan_iter(match=pattern, count=1000)]
        except Exception as exc:  # noqa: BLE001 - redis-py and socket errors alike
            tier._fail(exc)
            return None

    def items(self) -> Iterator[tuple[bytes, Any]]:
        """Every stored entry, after a retry of the pending deletes (start-up)."""
        self.retry(force=True)
        for key in self.keys():
            payload = self.get(key)
            if payload is not None:
                yield key, payload

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return self.pending.stats()

    def close(self) -> None:
        self.retry(force=True)
        if len(self.pending):
            where = self.pending.journal or "nowhere (no journal): their records may come back at a restart"
            log.error("semantic store: %d deletes still pending at close, kept in %s", len(self.pending), where)
        self.tier.close()
