"""A region's metadata log and state: on the region's own Redis, or in memory for the simulation.

Layout on Redis (``P`` the prefix, default ``ctxcache:repl:``; the hash tag keeps one region's
keys in one Cluster slot, so a commit is one MULTI):

    P{R}:log      Stream of every update delivered in region R, local or from a peer, in delivery
                  order (a causal order per key): entry id ``<seq>-0``, field u (ops.Update bytes);
                  XADD MAXLEN ~ ``limit``. Peers XRANGE it from the last seq they applied.
    P{R}:state    Hash: metadata key -> state.KeyState bytes (the registers and merged clock)
    P{R}:meta     Hash: seq (the log's head), pos:<peer> (seq of the peer's log applied here),
                  inbox (last inbox id taken)
    P{R}:inbox    Stream: updates the region's workers ask for (kind k, target t, value v);
                  the replicator stamps them, the one writer of the log and the state
    P{R}:acks     Hash: peer -> seq of R's log it has applied (peers write it: R's queue to them)
    P{R}:results  Hash: "<uid> <process>" -> JSON result of applying an update there (verified)
    P{R}:follow   Hash: worker -> seq of R's log it has applied (a restart resumes there)
    P{R}:owner    String: the replicator holding the region (SET NX PX, renewed)

The log, the state and the positions are written in one transaction per batch: a replicator
that dies mid-batch leaves the previous commit, re-reads from its positions and drops what it
had already delivered as duplicates (their clocks say so).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from ..events.streams import connect

PREFIX = "ctxcache:repl:"
LIMIT = 1_000_000  # log entries kept; a peer further behind than that gets a full sync


class LinkDown(ConnectionError):
    """The region's Redis cannot be reached now (a partition, or it is down)."""


class RegionLog:
    """The interface both backends implement (the Redis one is the product; the memory one is
    the simulation's, with the same semantics and a switch to cut it)."""

    def commit(self, entries: list[bytes], state: dict[str, bytes], meta: dict[str, Any]) -> int:
        """Append ``entries`` to the log, write state and meta fields, atomically. Returns the head seq."""
        raise NotImplementedError

    def read(self, after: int, count: int) -> list[tuple[int, bytes]]:
        raise NotImplementedError

    def first_seq(self) -> int:
        """Seq of the oldest entry kept (0: empty)."""
        raise NotImplementedError

    def load(self) -> tuple[dict[str, bytes], dict[str, str]]:
        raise NotImplementedError

    def submit(self, kind: str, target: str, value: Any) -> None:
        raise NotImplementedError

    def inbox(self, after: str, count: int) -> list[tuple[str, dict[str, Any]]]:
        raise NotImplementedError

    def trim_inbox(self, upto: str) -> None:
        raise NotImplementedError

    def ack(self, peer: str, seq: int) -> None:
        raise NotImplementedError

    def acks(self) -> dict[str, int]:
        raise NotImplementedError

    def put_result(self, uid: str, process: str, result: dict[str, Any]) -> None:
        raise NotImplementedError

    def results(self) -> dict[str, dict[str, Any]]:
        raise NotImplementedError

    def follow_pos(self, worker: str) -> int:
        raise NotImplementedError

    def set_follow_pos(self, worker: str, seq: int) -> None:
        raise NotImplementedError


def _value(raw: str) -> Any:
    return json.loads(raw)


class MemoryLog(RegionLog):
    """In-process log for the deterministic simulation; ``up = False`` cuts every link to it."""

    def __init__(self, limit: int = LIMIT) -> None:
        self.entries: list[tuple[int, bytes]] = []
        self.state: dict[str, bytes] = {}
        self.meta: dict[str, str] = {}
        self._inbox: list[tuple[str, dict[str, Any]]] = []
        self._inbox_n = 0
        self._acks: dict[str, int] = {}
        self._results: dict[str, dict[str, Any]] = {}
        self._follow: dict[str, int] = {}
        self.limit = limit
        self.up = True
        self.lock = threading.Lock()

    def _check(self) -> None:
        if not self.up:
            raise LinkDown("link cut (simulated partition)")

    def commit(self, entries: list[bytes], state: dict[str, bytes], meta: dict[str, Any]) -> int:
        self._check()
        with self.lock:
            head = int(self.meta.get("seq", 0))
            for raw in entries:
                head += 1
                self.entries.append((head, raw))
            if len(self.entries) > self.limit:
                del self.entries[: len(self.entries) - self.limit]
            self.state.update(state)
            self.meta.update({k: str(v) for k, v in meta.items()})
            self.meta["seq"] = str(head)
            return head

    def read(self, after: int, count: int) -> list[tuple[int, bytes]]:
        self._check()
        with self.lock:
            first = self.entries[0][0] if self.entries else after + 1
            i = max(0, after + 1 - first)
            return self.entries[i : i + count]

    def first_seq(self) -> int:
        self._check()
        return self.entries[0][0] if self.entries else 0

    def load(self) -> tuple[dict[str, bytes], dict[str, str]]:
        self._check()
        with self.lock:
            return dict(self.state), dict(self.meta)

    def submit(self, kind: str, target: str, value: Any) -> None:
        self._check()
        with self.lock:
            self._inbox_n += 1
            self._inbox.append((f"{self._inbox_n}-0", {"k": kind, "t": target, "v": value}))

    def inbox(self, after: str, count: int) -> list[tuple[str, dict[str, Any]]]:
        self._check()
        n = int(after.split("-")[0]) if after else 0
        return [(i, f) for i, f in self._inbox if int(i.split("-")[0]) > n][:count]

    def trim_inbox(self, upto: str) -> None:
        n = int(upto.split("-")[0])
        self._inbox = [(i, f) for i, f in self._inbox if int(i.split("-")[0]) > n]

    def ack(self, peer: str, seq: int) -> None:
        self._check()
        self._acks[peer] = max(seq, self._acks.get(peer, 0))

    def acks(self) -> dict[str, int]:
        return dict(self._acks)

    def put_result(self, uid: str, process: str, result: dict[str, Any]) -> None:
        self._results[f"{uid} {process}"] = result

    def results(self) -> dict[str, dict[str, Any]]:
        return dict(self._results)

    def follow_pos(self, worker: str) -> int:
        return self._follow.get(worker, 0)

    def set_follow_pos(self, worker: str, seq: int) -> None:
        self._follow[worker] = seq


class RedisLog(RegionLog):
    """One region's log on its Redis (or Redis Cluster: every key of a region in one slot)."""

    def __init__(
        self, url: str, region: str, *, prefix: str = PREFIX, limit: int = LIMIT, timeout: float = 2.0,
        cluster: bool = False,
    ) -> None:  # fmt: skip
        self.url, self.region, self.limit = url, region, limit
        self.r = connect(url, cluster, timeout)
        base = f"{prefix}{{{region}}}:"
        self.k = {n: base + n for n in ("log", "state", "meta", "inbox", "acks", "results", "follow", "owner")}

    def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        import redis

        try:
            return fn(*args, **kw)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            raise LinkDown(f"region {self.region} at {self.url}: {exc}") from None

    def commit(self, entries: list[bytes], state: dict[str, bytes], meta: dict[str, Any]) -> int:
        def run() -> int:
            head = int(self.r.hget(self.k["meta"], "seq") or 0)  # the one writer: no race on it
            p = self.r.pipeline(transaction=True)
            for raw in entries:
                head += 1
                p.xadd(self.k["log"], {"u": raw}, id=f"{head}-0", maxlen=self.limit, approximate=True)
            if state:
                p.hset(self.k["state"], mapping=state)  # type: ignore[arg-type]
            p.hset(self.k["meta"], mapping={**{k: str(v) for k, v in meta.items()}, "seq": str(head)})
            p.execute()
            return head

        return int(self._call(run))

    def read(self, after: int, count: int) -> list[tuple[int, bytes]]:
        got = self._call(self.r.xrange, self.k["log"], f"{after + 1}-0", "+", count=count)
        return [(int(i.split(b"-")[0]), f[b"u"]) for i, f in got]

    def first_seq(self) -> int:
        got = self._call(self.r.xrange, self.k["log"], "-", "+", count=1)
        return int(got[0][0].split(b"-")[0]) if got else 0

    def load(self) -> tuple[dict[str, bytes], dict[str, str]]:
        def run() -> tuple[dict[str, bytes], dict[str, str]]:
            p = self.r.pipeline(transaction=True)  # the state at exactly the head seq
            p.hgetall(self.k["state"])
            p.hgetall(self.k["meta"])
            state, meta = p.execute()
            return ({k.decode(): v for k, v in state.items()}, {k.decode(): v.decode() for k, v in meta.items()})

        return self._call(run)  # type: ignore[no-any-return]

    def submit(self, kind: str, target: str, value: Any) -> None:
        self._call(self.r.xadd, self.k["inbox"], {"k": kind, "t": target, "v": json.dumps(value)})

    def inbox(self, after: str, count: int) -> list[tuple[str, dict[str, Any]]]:
        got = self._call(self.r.xrange, self.k["inbox"], f"({after}" if after else "-", "+", count=count)
        return [(i.decode(), {"k": f[b"k"].decode(), "t": f[b"t"].decode(), "v": _value(f[b"v"].decode())})
                for i, f in got]  # fmt: skip

    def trim_inbox(self, upto: str) -> None:
        self._call(self.r.xtrim, self.k["inbox"], minid=upto, approximate=False)
        self._call(self.r.xdel, self.k["inbox"], upto)

    def ack(self, peer: str, seq: int) -> None:
        self._call(self.r.hset, self.k["acks"], peer, seq)

    def acks(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self._call(self.r.hgetall, self.k["acks"]).items()}

    def put_result(self, uid: str, process: str, result: dict[str, Any]) -> None:
        self._call(self.r.hset, self.k["results"], f"{uid} {process}", json.dumps(result))

    def results(self) -> dict[str, dict[str, Any]]:
        got = self._call(self.r.hgetall, self.k["results"])
        return {k.decode(): json.loads(v) for k, v in got.items()}

    def follow_pos(self, worker: str) -> int:
        return int(self._call(self.r.hget, self.k["follow"], worker) or 0)

    def set_follow_pos(self, worker: str, seq: int) -> None:
        self._call(self.r.hset, self.k["follow"], worker, seq)

    def claim(self, owner: str, ttl_ms: int) -> bool:
        """The region's one replicator: True if ``owner`` holds (or just took) the claim."""
        r, k = self.r, self.k["owner"]
        if self._call(r.set, k, owner, nx=True, px=ttl_ms):
            return True
        if (self._call(r.get, k) or b"").decode() == owner:
            self._call(r.pexpire, k, ttl_ms)
            return True
        return False

    def release(self, owner: str) -> None:
        """Give the claim up (a clean stop): the region's next replicator need not wait out the TTL."""
        script = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
        self._call(self.r.eval, script, 1, self.k["owner"], owner)
