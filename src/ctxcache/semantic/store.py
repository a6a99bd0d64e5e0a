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

On Redis, an erase also writes a tombstone (tombstones.py) before the delete, and every pending
delete gets one before it is retried: other processes on the same prefix leave tombstoned records
out when they list entries, and ``sync`` (at most every ``sync_interval`` seconds, one round trip)
tells their cache which entries to drop from memory.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ConfigError, DeleteFailedError, TierUnavailableError
from ..tiers import DiskTier, MemoryTier, RedisTier, Tier
from .pending import PendingDeletes
from .tombstones import Tombstones

_UNBOUNDED = 1 << 62
_BATCH = 256  # pending deletes sent in one round trip
TOMBSTONE_TTL = 7 * 86_400.0  # a pending delete's tombstone: outlives any outage the journal would
log = logging.getLogger("ctxcache.semantic")


class EntryStore:
    def __init__(
        self,
        tier: Tier,
        *,
        journal: str | os.PathLike[str] | None = None,
        max_pending: int = 100_000,
        retry_interval: float = 1.0,
        sync_interval: float = 2.0,
        tombstone_linger: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``sync_interval``: how often (at most) this process reads other processes' tombstones
        (Redis only). ``tombstone_linger``: how long a tombstone outlives its confirmed delete
        (default 10 minutes), so every replica syncing meanwhile sees it; one that could not sync
        for that long checks every entry it holds once (a SCAN)."""
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
        linger = max(600.0, 15 * sync_interval) if tombstone_linger is None else tombstone_linger
        if not (0 < sync_interval < linger <= TOMBSTONE_TTL):
            raise ConfigError(f"semantic store: need 0 < sync_interval ({sync_interval!r}) < tombstone_linger "
                              f"({linger!r}) <= {TOMBSTONE_TTL:g}")  # fmt: skip
        self.tombs = Tombstones(tier, ttl=TOMBSTONE_TTL, linger=linger) if isinstance(tier, RedisTier) else None
        self.sync_interval, self._known = sync_interval, dict[bytes, float]()  # live tombstones -> expiry
        self._sync_at = self._synced_at = clock()
        self._read_at: float | None = None  # the server's time at the last read of the tombstones
        self._prune_at = 0.0  # server time: when ``_known`` is next cleared of expired tombstones
        self.syncs = 0

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
        sync_interval: float = 2.0,
        tombstone_linger: float | None = None,
        **kw: Any,
    ) -> EntryStore:
        """``journal``: a local file that keeps failed deletes across a restart (None: memory only,
        so an entry erased while Redis was unreachable may come back after a crash); the other
        processes on ``prefix`` learn of erasures from tombstones (see tombstones.py)."""
        tier = RedisTier(_UNBOUNDED, "fifo", url=url, prefix=prefix, name="semantic", **kw)
        try:
            return cls(tier, journal=journal, max_pending=max_pending, sync_interval=sync_interval,
                       tombstone_linger=tombstone_linger)  # fmt: skip
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
            sync = _seconds(spec.get("sync_interval", 2.0), "sync_interval")
            linger = (
                None if spec.get("tombstone_linger") is None else _seconds(spec["tombstone_linger"], "tombstone_linger")
            )
            return cls.redis(
                str(spec.get("url", "redis://127.0.0.1:6379/0")), prefix=str(spec.get("prefix", "ctxsem:")),
                journal=journal, max_pending=spec.get("max_pending", 100_000),
                sync_interval=sync, tombstone_linger=linger,
            )  # fmt: skip
        if kind == "memory":
            return cls.memory()
        raise ConfigError(f"semantic store kind must be disk, redis or memory, not {kind!r}")

    def size(self, payload: Any) -> int:
        return self.tier.size_of(payload)

    def put(self, key: bytes, payload: Any) -> int:
        if key in self.pending or key in self._known:  # stored again after an erase: the old delete and
            with self._lock:  # tombstone must not take the new record
                written = self.tier.put(key, payload)
                self.pending.discard([key], confirmed=False)  # only once written: else the old record stays
                self._known.pop(key, None)
            if self.tombs is not None:
                self.tombs.clear([key])
            return written
        self.retry()
        return self.tier.put(key, payload)

    def get(self, key: bytes) -> Any | None:
        return self.tier.get(key)

    def delete(self, key: bytes, *, erase: bool = False) -> bool:
        """True if the record was there and is gone. A delete that may not have landed is kept in
        ``pending`` (and retried) before this returns False. ``erase``: other processes must drop
        the entry too (see ``erase_many``)."""
        if erase and self.tombs is not None:
            return self.erase_many([key]) == 1
        self.retry()
        try:
            return self.tier.delete(key)
        except (TierUnavailableError, OSError) as exc:
            with self._lock:
                self.pending.add([key])
            log.warning("semantic store: delete of %s failed, kept for retry: %s", key.hex(), exc)
            return False

    def erase_many(self, keys: list[bytes]) -> int:
        """Delete erased entries' records, each batch tombstoned first (Redis; three round trips a
        batch: tombstone, DEL, shorten to the linger); the records deleted. Failed deletes are
        kept in ``pending``, as ``delete`` keeps them."""
        if self.tombs is None:
            return sum(self.delete(k) for k in keys)
        self.retry()
        deleted = 0
        for i in range(0, len(keys), _BATCH):
            batch = keys[i : i + _BATCH]
            marked = self.tombs.mark(batch)
            with self._lock:
                self._known.update(dict.fromkeys(batch if marked is not None else [], marked or 0.0))
            try:
                deleted += self.tier.delete_many(batch)
                landed = batch
            except (TierUnavailableError, OSError) as exc:
                failed = set(exc.failed) if isinstance(exc, DeleteFailedError) else set(batch)
                deleted += exc.deleted if isinstance(exc, DeleteFailedError) else 0
                landed = [k for k in batch if k not in failed]
                with self._lock:
                    self.pending.add([k for k in batch if k in failed])
                log.warning("semantic store: %d of %d deletes failed, kept for retry: %s", len(failed), len(batch), exc)
            if marked is not None and landed:
                self._settled(landed, self.tombs.settle(landed))
        return deleted

    def _settled(self, keys: list[bytes], until: float | None) -> None:
        if until is not None:
            with self._lock:
                self._known.update((k, until) for k in keys if k in self._known)

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
                batch = keys[i : i + _BATCH]
                # Best effort: a record deleted without a tombstone still cannot come back at a start-up
                if self.tombs is not None and (marked := self.tombs.mark(batch)) is not None:
                    self._known.update(dict.fromkeys(batch, marked))
                try:
                    self.tier.delete_many(batch)
                except (TierUnavailableError, OSError):
                    break  # any of the batch may have failed: all of it stays
                done += batch
                if self.tombs is not None and (until := self.tombs.settle(batch)) is not None:
                    self._known.update(dict.fromkeys(batch, until))  # under the lock already
            self.pending.discard(done)
        return len(done)

    def sync(self, *, force: bool = False) -> tuple[frozenset[bytes], bool]:
        """Other processes' erasures, at most every ``sync_interval`` seconds (Redis only; one round
        trip): the keys tombstoned since the last read, and whether a tombstone may have expired
        unseen (no read succeeded for ``linger``: the caller must check what it holds)."""
        now = self._clock()
        if self.tombs is None or (not force and now < self._sync_at):
            return frozenset(), False
        with self._lock:
            if not force and now < self._sync_at:
                return frozenset(), False
            self._sync_at = now + self.sync_interval
            read = self.tombs.live(self._read_at)
            if read is None:
                return frozenset(), False
            server, live = read
            stale = now - self._synced_at > self.tombs.linger - self.sync_interval - self.tombs.skew
            new = frozenset(k for k, until in live.items() if self._known.get(k) != until)  # a rewrite: news too
            self._known.update(live)
            if server >= self._prune_at:  # not every sync: O(tombstones held), and an expired one is harmless
                self._known, self._prune_at = {k: u for k, u in self._known.items() if u > server}, server + 60.0
            self._read_at = server
            if not stale:  # else it stays stale until a full read (``scan``) succeeds
                self._synced_at = now
            self.syncs += 1
        return new, stale

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
        if self.tombs is not None:  # another process's erasures, pending or not
            tomb = self.tombs.key
            found = [k for k in found if self.tombs.tier.prefix + k != tomb]  # an empty prefix lists it
            read = self.tombs.live()
            if read is None:
                return None  # a record erased elsewhere could not be told apart
            with self._lock:
                self._read_at, self._known = read
                self._synced_at = self._clock()
                self._sync_at = self._synced_at + self.sync_interval
        with self._lock:
            return [k for k in found if k not in self.pending and k not in self._known]

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
            tombs = {} if self.tombs is None else {"tombstones": len(self._known), "tombstone_syncs": self.syncs,
                                                   "tombstones_read": self.tombs.read,
                                                   "tombstone_errors": self.tombs.errors}  # fmt: skip
            return {**self.pending.stats(), **tombs}

    def close(self) -> None:
        self.retry(force=True)
        if len(self.pending):
            where = self.pending.journal or "nowhere (no journal): their records may come back at a restart"
            log.error("semantic store: %d deletes still pending at close, kept in %s", len(self.pending), where)
        self.tier.close()


def _seconds(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"a semantic redis store's {name} must be a number of seconds, got {value!r}")
    return float(value)
