"""Tombstones: erased semantic-cache keys, published in Redis so that other replicas learn of them.

A replica (another process on the same Redis prefix) holds entries in memory and loads every
record at start-up; the pending-delete journal (pending.py) is local to the process that erased.
So an erase first writes a tombstone, one Redis sorted set per prefix, member = the entry key,
score = the time the tombstone expires, then deletes the record. Replicas read the live
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

Every time here is the Redis server's clock (``TIME``, read inside a Lua script, so a write and its
time are one atomic step): a reader's next read starts where its last one ended on that same clock,
so no tombstone written in between is missed however far the replicas' own clocks drift. A script
is one command on one key: one round trip, and on a Cluster it goes to that key's master.
"""

from __future__ import annotations

import logging
from typing import Any

from ..tiers import RedisTier

log = logging.getLogger("ctxcache.semantic")
MARGIN = 1.0  # seconds: the server's clock may step back (NTP); a read reaches that far behind the last one

# KEYS[1]: the set; ARGV: seconds to live, "XX" (only those still there) or "", the members. Returns
# the expiry written. One ZADD per member: no unpack limit on a large batch, still one atomic step.
_MARK = """
local t = redis.call('TIME')
local expiry = string.format('%.6f', tonumber(t[1]) + tonumber(t[2]) / 1e6 + tonumber(ARGV[1]))
for i = 3, #ARGV do
  if ARGV[2] == 'XX' then redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
  else redis.call('ZADD', KEYS[1], expiry, ARGV[i]) end
end
return expiry
"""
# KEYS[1]: the set; ARGV[1]: read only expiries above this ("": every live one). Prunes the expired
# ones and returns {server time, member, score, member, score...}.
_LIVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.6f', now))
local low = now
if ARGV[1] ~= '' then low = math.max(now, tonumber(ARGV[1])) end
local out = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.6f', low), '+inf', 'WITHSCORES')
table.insert(out, 1, string.format('%.6f', now))
return out
"""


class Tombstones:
    def __init__(self, tier: RedisTier, *, ttl: float, linger: float) -> None:
        self.tier, self.key = tier, b"ctxtomb@" + tier.prefix
        self.ttl, self.linger = ttl, linger
        self.skew, self.errors, self.read = MARGIN, 0, 0  # read: tombstones transferred by ``live``

    def _run(self, script: str, args: list[Any]) -> Any:
        res = self.tier._pipeline([("eval", (script, 1, self.key, *args), {})])  # the tier owns the connection
        bad = None if res is None else res[0] if isinstance(res[0], BaseException) else None
        if res is None or bad is not None:
            self.errors += 1  # unreachable: the tier logs its outage once; a refusal is news every time
            (log.debug if bad is None else log.warning)("semantic store: tombstones at %r: %s", self.key,
                                                        bad or "server unreachable")  # fmt: skip
            return None
        return res[0]

    def mark(self, keys: list[bytes]) -> float | None:
        """Before a delete: the keys are erased for every replica (until ``ttl``); the expiry (server
        time), or None if it could not be written."""
        until = self._run(_MARK, [self.ttl, "", *keys])
        return None if until is None else float(until)

    def settle(self, keys: list[bytes]) -> float | None:
        """The records are gone: keep the tombstones only ``linger`` more seconds (only those still there)."""
        until = self._run(_MARK, [self.linger, "XX", *keys]) if keys else None
        return None if until is None else float(until)

    def clear(self, keys: list[bytes]) -> bool:
        """The keys were stored again: their old erase no longer applies."""
        return bool(keys) and self.tier._pipeline([("zrem", (self.key, *keys), {})]) is not None

    def live(self, since: float | None = None) -> tuple[float, dict[bytes, float]] | None:
        """The server's time and the tombstones not expired, with their expiry (the expired ones
        are pruned in the same round trip); None when Redis cannot be read. ``since``: a server
        time this replica read before: only those written or rewritten after it (their expiry is
        later than ``since + linger``, less ``skew`` for a step of the server's clock), and the
        pending ones, which are few."""
        res = self._run(_LIVE, ["" if since is None else repr(since + self.linger - self.skew)])
        if res is None:
            return None
        pairs = res[1:]
        self.read += len(pairs) // 2
        return float(res[0]), {bytes(pairs[i]): float(pairs[i + 1]) for i in range(0, len(pairs), 2)}
