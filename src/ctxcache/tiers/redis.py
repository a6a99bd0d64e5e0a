"""RedisTier: encoded blocks in Redis or Valkey (one server or a Redis Cluster), shared by every
process that uses the same prefix, model and salt.

Each block is one string value ``<prefix><16-byte key>`` holding the codec's blob (header with
token bytes, checksums), written with ``SET ... PX ttl`` when a TTL is configured. Batches are
pipelined. Every socket wait (connect, each read, each write) is bounded by ``timeout`` (default
50 ms), and redis-py's own retries are off, so a hung or dead server costs a request at most about
one timeout. A pipeline that moves more than ``BULK_BYTES`` of blocks (a 36-block prompt of 1.2 MB
blocks is 42 MB) runs on a second connection whose waits are bounded by ``bulk_timeout`` (1 s):
on a busy host one such transfer can pause past 50 ms while the server is alive, and marking the
tier down for it turned a cross-worker hit into a miss. The first connection error marks the tier unhealthy: from then on it answers every
call at once (misses, refused writes, deletes that raise) and a background thread retries the connection every
``retry_interval`` seconds; a request never fails because Redis is down. In a Cluster each master
is marked down on its own (redis_cluster.Masters): only its keys are answered that way, the other
masters keep serving, and the tier is unhealthy only when every master is down.

Accounting is local (BlobTier's key -> size index): ``used_bytes`` counts the blocks this process wrote or found and is charging
for, which is what ``capacity`` bounds; blocks other processes keep alive are theirs to evict, and
TTLs and the server's maxmemory policy bound the whole store. A Bloom filter over the prefix's
keys (rebuilt by SCAN at connect, every ``bloom_refresh`` seconds and when it fills, see bloom.py) answers "surely
absent" without a round trip; with KV events (docs/events.md) other workers' writes are added as their events arrive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..codec import Block, Header, header_length, read_header
from ..errors import ConfigError, CorruptBlockError, DeleteFailedError, MissingDependencyError, TierUnavailableError
from ..units import parse_duration
from .base import key_bytes
from .blob import BlobTier
from .bloom import KeyFilter
from .redis_cluster import DOWN as _DOWN
from .redis_cluster import REDIRECT, MasterDown, Masters, Op, log, run_pipeline
from .redis_cluster import redis_py as _redis
from .redis_conn import RedisHealth

SCAN_BATCH = 256  # keys whose headers are read in one pipeline
BULK_BYTES = 4 << 20  # block bytes past which a pipeline runs on the bulk connection
HEAD_GUESS = 4096  # bytes read first from each blob: the whole header of typical blocks
T = TypeVar("T")


class RedisTier(RedisHealth, BlobTier):
    kind = "redis"
    shared = True

    def __init__(
        self,
        capacity: int,
        policy: Any = "lru",
        *,
        url: str = "redis://127.0.0.1:6379/0",
        cluster: bool = False,
        prefix: str = "ctxcache:",
        ttl: float | str | None = None,
        timeout: float | str = 0.05,
        bulk_timeout: float | str = 1.0,
        retry_interval: float | str = 1.0,
        bloom: bool = True,
        bloom_items: int = 1_000_000,
        bloom_fpr: float = 0.01,
        bloom_refresh: float | str | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(capacity, policy, **kw)
        if _redis is None:
            raise MissingDependencyError("the redis tier needs redis-py: pip install 'ctxcache[redis]'")
        if not isinstance(url, str) or urlsplit(url).scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(f"redis tier url must look like 'redis://host:port/db', got {url!r}")
        self.url, self.cluster, self.prefix = url, bool(cluster), prefix.encode()
        self.ttl = None if ttl is None else parse_duration(ttl, "ttl")
        self.timeout = parse_duration(timeout, "timeout")
        self.bulk_timeout = max(self.timeout, parse_duration(bulk_timeout, "bulk_timeout"))
        self.retry_interval = parse_duration(retry_interval, "retry_interval")
        # Unset: 300 s, or hourly once KV events feed the filter (events/runtime.py): then the
        # SCAN is a safety net that only drops keys deleted since.
        self.bloom_refresh_set = bloom_refresh is not None
        self.bloom_refresh = parse_duration(300.0 if bloom_refresh is None else bloom_refresh, "bloom_refresh")
        try:
            self.filter = KeyFilter(bloom_items, bloom_fpr) if bloom else None
        except ValueError as exc:
            raise ConfigError(f"redis tier: {exc}") from None
        self._client: Any = None
        self._bulk: Any = None  # the same server(s), waits bounded by bulk_timeout (redis_conn.py)
        self._healthy = False
        self.errors = self.reconnects = self.round_trips = 0
        self._scan_failed = False  # the last filter rebuild failed: no early rebuilds until one works
        self._stop, self._wake = threading.Event(), threading.Event()
        self._health = threading.Lock()  # request threads fail at once: one of them logs the outage
        self._masters = Masters(self.retry_interval) if self.cluster else None
        if not self._connect():  # once, synchronously: a server that is up is usable from the first call
            log.warning("redis tier %r: no answer at startup (retried every %.1f s)", self.name, self.retry_interval)
        self._thread = threading.Thread(target=self._run, name=f"ctxcache-redis-{self.name}", daemon=True)
        self._thread.start()

    # --- SCAN of the prefix (connection, health and the Bloom rebuild: redis_conn.py) --------------
    def stored_keys_of(self, tenant: bytes | None) -> list[bytes] | None:
        """SCAN the prefix (every primary of a cluster) and read each block's header with GETRANGE,
        never its payload: the keys whose verified header names ``tenant``. Values that are not
        intact blocks are skipped (nothing in them can be attributed). ``tenant=None``: every intact
        block under the prefix (a flush). None if Redis (or a Cluster master) is down."""
        return self._scan(lambda h: h.key if tenant is None or h.tenant == tenant else None)

    def stored_links(self) -> list[tuple[bytes, bytes]] | None:
        """(key, parent) from every intact block's header under the prefix, as ``stored_keys_of``
        reads them: blocks other processes wrote under a key being invalidated are found here."""
        return self._scan(lambda h: (h.key, h.parent))

    def _scan(self, pick: Callable[[Header], T | None]) -> list[T] | None:
        """What ``pick`` keeps of each intact block's header (one batch of headers held at a time,
        never every header of the prefix). None if Redis (or a Cluster master) is down."""
        if not self._healthy or self.masters_down:
            return None
        found: list[T] = []
        batch: list[bytes] = []
        try:
            for name in self._client.scan_iter(match=self._pattern(), count=1000):
                batch.append(name)
                if len(batch) >= SCAN_BATCH:
                    found += [x for h in self._headers(batch) if (x := pick(h)) is not None]
                    batch = []
            found += [x for h in self._headers(batch) if (x := pick(h)) is not None]
        except TierUnavailableError:
            return None
        except Exception as exc:  # noqa: BLE001 - redis-py and socket errors alike
            self._fail(exc)
            return None
        return found

    def _headers(self, names: list[bytes]) -> list[Header]:
        heads = self._pipeline(("getrange", (nm, 0, HEAD_GUESS - 1), {}) for nm in names)
        if heads is None or any(isinstance(h, _DOWN) for h in heads):
            raise TierUnavailableError(f"redis tier {self.name!r}: unreachable during a scan")
        longer: dict[int, int] = {}
        for i, head in enumerate(heads):
            try:
                if isinstance(head, bytes) and header_length(head) > len(head):
                    longer[i] = header_length(head)
            except CorruptBlockError:
                heads[i] = None
        if longer:  # headers past the first read (many arrays per block): one more range read each
            more = self._pipeline(("getrange", (names[i], 0, n - 1), {}) for i, n in longer.items())
            if more is None or any(isinstance(h, _DOWN) for h in more):
                raise TierUnavailableError(f"redis tier {self.name!r}: unreachable during a scan")
            for i, head in zip(longer, more):
                heads[i] = head
        out = []
        n = len(self.prefix)
        for name, head in zip(names, heads):
            if not isinstance(head, bytes) or not head:
                continue  # gone since the SCAN, or not a block
            try:
                h = read_header(head)
            except CorruptBlockError:
                continue
            if h.key == name[n:]:  # a blob filed under another key's name is not that key's block
                out.append(h)
        return out

    # --- round trips -------------------------------------------------------------------------------
    def _pipeline(self, ops: Iterable[Op], nbytes: int = 0) -> list[Any] | None:
        """Run commands in one pipeline; None (and unhealthy) when the server cannot be reached. A
        Cluster: one pipeline per master, a down master's commands answer its error (MasterDown).
        ``nbytes``: the block bytes it moves; past ``BULK_BYTES`` on the bulk connection."""
        if not self._healthy:
            return None
        bulk = self._bulk if nbytes > BULK_BYTES else None
        client, todo = bulk if bulk is not None else self._client, list(ops)
        if not todo:
            return []
        try:
            if self._masters is None:
                return self._run_pipeline(client, todo)
            return self._run_cluster(client, todo)
        except Exception as exc:  # noqa: BLE001 - redis-py and socket errors alike
            self._fail(exc)
            return None

    def _run_cluster(self, client: Any, todo: list[Op]) -> list[Any]:
        assert self._masters is not None
        out, failed, stuck = self._masters.run(client, todo, self._run_pipeline)
        if failed:
            self.errors += failed
            self._wake.set()  # the background thread probes the masters marked down
        if stuck is not None:
            self._fail(stuck)  # no node answered a topology refresh: reconnect
        elif failed and self._masters.all_down(client):
            self._fail(MasterDown("every master of the cluster is down"))
        return out

    def _run_pipeline(self, client: Any, ops: list[Op]) -> list[Any]:
        self.round_trips += 1
        return run_pipeline(client, ops)

    def load_many(
        self, keys: Sequence[Hashable], tokens: Sequence[bytes | None], unavailable: set[int] | None = None
    ) -> list[Block | None]:
        kbs = [key_bytes(k) for k in keys]
        blobs = self._pipeline((("get", (self.prefix + kb,), {}) for kb in kbs), self._expected(kbs))
        if blobs is None:  # the server unreachable: every key unavailable, still charged
            blobs = [ConnectionError("unreachable")] * len(kbs)
        out: list[Block | None] = []
        bad: list[bytes] = []
        for i, (kb, blob, want) in enumerate(zip(kbs, blobs, tokens)):
            away = isinstance(blob, _DOWN + REDIRECT)  # not reached (MOVED: stored on the slot's new owner)
            if away and unavailable is not None:
                unavailable.add(i)
            block = None
            if isinstance(blob, bytes):
                try:
                    block = self._codec.decode(blob, kb)
                except CorruptBlockError:
                    self.corrupt += 1
                    bad.append(kb)
            if block is None and not away:
                self._charge(kb, None)  # gone (expired, evicted by the server) or bad
            out.append(None if block is None or (want is not None and block.tokens != want) else block)
        if bad:
            self._pipeline(("delete", (self.prefix + kb,), {}) for kb in bad)
        return out

    def _expected(self, kbs: Sequence[bytes]) -> int:
        """Bytes a read of ``kbs`` returns: the sizes this process charges, and for blocks other
        processes wrote the mean of those (1 MiB while it charges none: a KV block's order)."""
        sizes = self._sizes
        mean = self.used_bytes // len(sizes) if sizes else 1 << 20
        return sum(sizes.get(kb, mean) for kb in kbs)

    def get_blob(self, key: Hashable) -> bytes | None:
        kb = key_bytes(key)
        got = self._pipeline([("get", (self.prefix + kb,), {})])
        if not got or not isinstance(got[0], bytes):
            return None
        try:
            self._codec.decode(got[0], kb)
        except CorruptBlockError:
            self.corrupt += 1
            return None
        return got[0]

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        px = {"px": int(self.ttl * 1000)} if self.ttl else {}
        kbs = [key_bytes(k) for k, _ in items]
        ops = (("set", (self.prefix + kb, blob), px) for kb, (_, blob) in zip(kbs, items))
        res = self._pipeline(ops, sum(len(blob) for _, blob in items))
        ok = [r is True for r in res] if res is not None else [False] * len(items)
        for kb, (_, blob), good in zip(kbs, items, ok):
            if good:
                self._landed(kb, len(blob))
                if self.filter is not None:
                    self.filter.add(kb)
        if self._full():
            self._wake.set()  # more keys than it was sized for: rebuild (larger) now, not at the next refresh
        return ok

    def put_blob(self, key: Hashable, blob: bytes) -> int:
        if not self.put_blobs([(key, blob)])[0]:
            raise TierUnavailableError(f"redis tier {self.name!r}: write failed (server unreachable?)")
        return len(blob)

    def delete_many(self, keys: Iterable[Hashable]) -> int:
        """The keys deleted (a key already gone is no failure). The tier stops charging each key whose
        delete landed; DeleteFailedError names the keys whose delete may not have landed (their server
        or Cluster master unreachable, a refused command, a MOVED reply): they stay charged and the
        caller retries only them (the mover: placement counts each in ``delete_errors``)."""
        keys = list(keys)
        kbs = [key_bytes(k) for k in keys]
        if not kbs:
            return 0
        res = self._pipeline(("delete", (self.prefix + kb,), {}) for kb in kbs)
        failed: list[Hashable] = []
        deleted, why = 0, "server unreachable?"
        for key, kb, r in zip(keys, kbs, res if res is not None else [None] * len(kbs)):
            if isinstance(r, int):
                self._charge(kb, None)
                deleted += r == 1
                continue
            if isinstance(r, BaseException) and not failed:
                why = f"unreachable: {r}" if isinstance(r, _DOWN) else f"refused: {r}"
            failed.append(key)
        if failed:
            msg = f"redis tier {self.name!r}: {len(failed)} of {len(kbs)} deletes failed ({why})"
            raise DeleteFailedError(msg, failed, deleted)
        return deleted

    def delete(self, key: Hashable) -> bool:
        return self.delete_many([key]) == 1

    def _load_dead(self) -> list[bytes]:
        """Tombstones (BlobTier): one string value beside the blocks, ``<prefix>#tombstones``, the
        keys in hex (a scan of the prefix reads no block header in it: skipped)."""
        got = self._pipeline([("get", (self.prefix + b"#tombstones",), {})])
        if got is None or isinstance(got[0], BaseException):
            raise TierUnavailableError(f"redis tier {self.name!r}: tombstones unreadable")
        return [bytes.fromhex(h) for h in (got[0] or b"").decode().split()]

    def _save_dead(self, dead: set[bytes]) -> None:
        name = self.prefix + b"#tombstones"
        op: Op = ("set", (name, " ".join(kb.hex() for kb in sorted(dead))), {}) if dead else ("delete", (name,), {})
        got = self._pipeline([op])
        if got is None or isinstance(got[0], BaseException):
            raise TierUnavailableError(f"redis tier {self.name!r}: tombstones not written")

    def might_contain_many(self, keys: Sequence[Hashable]) -> list[bool]:
        if not self._healthy:
            return [False] * len(keys)
        if self.filter is None:
            return [True] * len(keys)
        return self.filter.might_contain_many([key_bytes(k) for k in keys])

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        for client in (self._client, self._bulk):
            if client is not None:
                client.close()
        if self._masters is not None:
            self._masters.close()
        self._healthy = False

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        host = urlsplit(self.url)
        out.update(
            url=f"{host.scheme}://{host.hostname}:{host.port}",  # no credentials in stats
            cluster=self.cluster,
            masters_down=self.masters_down,
            ttl=self.ttl,
            errors=self.errors,
            reconnects=self.reconnects,
            round_trips=self.round_trips,
            bloom=self.filter.stats() if self.filter is not None else None,
        )
        return out
