"""Tombstones: erased semantic-cache keys, published in Redis so that other replicas learn of them.

A replica (another process on the same Redis prefix) holds entries in memory and loads every
record at start-up; the pending-delete journal (pending.py) is local to the process that erased.
So an erase first writes a tombstone, one Redis sorted set per prefix, member = the entry key,
score = the wall-clock time the tombstone expires, then deletes the record. Replicas read the live
tombstones at start-up (and skip those records) and every ``sync_interval`` (and drop those
entries from memory): see store.py and cache.py.

While the delete is pending the tombstone lives ``ttl`` (long: days), rewritten on every retry;
once the record is confirmed gone it is set to expire after ``linger`` (a few sync periods, so
every replica that holds the entry sees it) and is then pruned by whichever replica syncs next.
The set is thus small (the last ``linger`` seconds of erasures, plus pending ones), and a sync
reads only what changed since the last one (see ``live``): one round trip that is empty in steady
state.

The key is ``ctxtomb@<prefix>``, not under the prefix: the store lists its records with SCAN
``<prefix>*``, and a process without this code would read a sorted set there as a corrupt record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..tiers import RedisTier

log = logging.getLogger("ctxcache.semantic")
SKEW = 5.0  # seconds two hosts' wall clocks may differ by


class Tombstones:
    def __init__(self, tier: RedisTier, *, ttl: float, linger: float, clock: Callable[[], float] = time.time) -> None:
        self.tier, self.key = tier, b"ctxtomb@" + tier.prefix
        self.ttl, self.linger, self.clock = ttl, linger, clock
        self.skew, self.errors, self.read = SKEW, 0, 0  # read: tombstones transferred by ``live``

    def _run(self, ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[Any] | None:
        res = self.tier._pipeline(ops)  # the tier owns the connection and its health
        bad = None if res is None else next((r for r in res if isinstance(r, BaseException)), None)
        if res is None or bad is not None:
            self.errors += 1  # unreachable: the tier logs its outage once; a refusal is news every time
            (log.debug if bad is None else log.warning)("semantic store: tombstones at %r: %s", self.key,
                                                        bad or "server unreachable")  # fmt: skip
            return None
        return res

    def mark(self, keys: list[bytes]) -> float | None:
        """Before a delete: the keys are erased for every replica (until ``ttl``); the expiry, or
        None if it could not be written."""
        until = self.clock() + self.ttl
        return until if self._run([("zadd", (self.key, dict.fromkeys(keys, until)), {})]) is not None else None

    def settle(self, keys: list[bytes]) -> float | None:
        """The records are gone: keep the tombstones only ``linger`` more seconds (only those still there)."""
        until = self.clock() + self.linger
        return until if self._run([("zadd", (self.key, dict.fromkeys(keys, until)), {"xx": True})]) else None

    def clear(self, keys: list[bytes]) -> bool:
        """The keys were stored again: their old erase no longer applies."""
        return bool(keys) and self._run([("zrem", (self.key, *keys), {})]) is not None

    def live(self, since: float | None = None) -> dict[bytes, float] | None:
        """The tombstones not expired, with their expiry (the expired ones are pruned in the same
        round trip); None when Redis cannot be read. ``since``: only those written or rewritten
        after that wall-clock time (their expiry is later than ``since + linger``; ``skew``
        allows for the writer's clock), and the pending ones, which are few."""
        now = self.clock()
        low = now if since is None else max(now, since + self.linger - self.skew)
        res = self._run([("zremrangebyscore", (self.key, "-inf", now), {}),
                         ("zrangebyscore", (self.key, f"({low}", "+inf"), {"withscores": True})])  # fmt: skip
        if res is None:
            return None
        self.read += len(res[1])
        return {bytes(k): float(s) for k, s in res[1]}
