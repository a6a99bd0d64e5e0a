"""Redis Cluster round trips and per-master health for RedisTier (see Masters).

redis-py's cluster pipeline re-sends failed commands one at a time, which would multiply the
timeout; here each master gets one plain pipeline of its keys' commands, a MOVED reply is a miss
(the topology is refreshed once), and a master that fails answers its own commands with its
error while the other masters' answers stand.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

redis_py: Any
try:
    import redis as redis_py
    from redis.backoff import NoBackoff
    from redis.cluster import RedisCluster
    from redis.exceptions import AskError, ClusterError, RedisClusterException
    from redis.exceptions import ConnectionError as _ConnErr
    from redis.exceptions import TimeoutError as _TimeoutErr
    from redis.retry import Retry

    # Errors that mean "the server is not reachable" (others, like OOM refusals, fail one call).
    DOWN: tuple[type[BaseException], ...] = (_ConnErr, _TimeoutErr, ClusterError, RedisClusterException, OSError)
    # A MOVED or ASK reply (MovedError subclasses AskError). Matched by type: redis-py strips the
    # "MOVED" word from the message, so its text starts with the slot number.
    REDIRECT: tuple[type[BaseException], ...] = (AskError,)
except ImportError:  # reported when a redis tier is configured; the rest of ctxcache runs without it
    redis_py, DOWN, REDIRECT = None, (OSError,), ()

log = logging.getLogger("ctxcache.tiers")
Op = tuple[str, tuple[Any, ...], dict[str, Any]]  # a command: name, args, kwargs
Runner = Callable[[Any, list[Op]], list[Any]]  # sends one pipeline to one server

__all__ = ["DOWN", "REDIRECT", "MasterDown", "Masters", "NoBackoff", "Op", "RedisCluster", "Retry", "redis_py"]
__all__ += ["run_pipeline"]


def run_pipeline(client: Any, ops: list[Op]) -> list[Any]:
    """One pipeline on one server; raises the first "unreachable" answer, other errors stand."""
    pipe = client.pipeline(transaction=False)
    for name, args, kwargs in ops:
        getattr(pipe, name)(*args, **kwargs)
    res = list(pipe.execute(raise_on_error=False))
    down = next((r for r in res if isinstance(r, DOWN)), None)
    if down is not None:
        raise down
    return res


class MasterDown(ConnectionError):  # an OSError: "unreachable" (DOWN) for every caller
    """A command not sent: its master is marked down (see Masters)."""


class Masters:
    """Per-master health of a Cluster tier, and its round trips: one plain pipeline per master,
    sent to all masters at once (a batch waits for the slowest master, about one timeout at most,
    however many are hung). A master whose pipeline fails with an "unreachable" error (down, or
    hung past the timeout) is marked down on its own: its commands are then answered MasterDown
    at once, without a round trip, until ``probe`` (the tier's background thread) finds it
    answering again. The other masters keep serving their keys. A master marked down is logged
    once (WARNING), and once (INFO) when it is back: not per request, nor per probe."""

    def __init__(self, retry_interval: float, workers: int = 8) -> None:
        self.retry_interval = retry_interval
        self.downs = self.recoveries = 0  # masters marked down; found up again
        self._down: dict[str, float] = {}  # master "host:port" -> when to probe it next (monotonic)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="ctxcache-redis-cluster")

    def down(self) -> list[str]:
        with self._lock:
            return sorted(self._down)

    def all_down(self, client: Any) -> bool:
        with self._lock:
            return all(n.name in self._down for n in client.get_primaries())

    def mark(self, name: str, why: object, quiet: bool = False) -> bool:
        """Mark a master down (``why``: for the log line; ``quiet``: it was down already before a
        reconnect, logged then); False if it already was."""
        with self._lock:
            if name in self._down:
                return False
            self._down[name] = time.monotonic() + self.retry_interval
            self.downs += 1
        if not quiet:
            log.warning(
                "redis cluster: master %s marked down (%s): its keys miss, refuse writes and fail deletes "
                "until it answers again (probed every %.1f s)", name, why, self.retry_interval,
            )  # fmt: skip
        return True

    def run(self, client: Any, todo: list[Op], run: Runner) -> tuple[list[Any], int, Exception | None]:
        """The answers (a failed master's commands answer its error), how many masters failed in
        this call, and the error of a topology refresh that failed (no node answered it)."""
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, (name, args, _) in enumerate(todo):
            node = client.get_node_from_key(args[2] if name == "eval" else args[0])  # eval(script, 1, key, ...)
            groups.setdefault(node.name, (node, []))[1].append(i)
        out: list[Any] = [None] * len(todo)
        down = set(self.down())
        live = [(node, idxs) for name, (node, idxs) in groups.items() if name not in down]
        for name in down & groups.keys():
            for i in groups[name][1]:
                out[i] = MasterDown(f"master {name} is down (probed again in the background)")
        # Every master at once: the first runs here, the others on the pool's threads.
        later = [self._pool.submit(_send, client, node, [todo[i] for i in idxs], run) for node, idxs in live[1:]]
        answers = [_send(client, live[0][0], [todo[i] for i in live[0][1]], run)] if live else []
        answers += [f.result() for f in later]
        failed = 0
        for (node, idxs), res in zip(live, answers):
            if isinstance(res, BaseException):
                failed += 1
                if isinstance(res, DOWN):
                    self.mark(node.name, f"{type(res).__name__}: {res}")
                res = [res] * len(idxs)
            for i, r in zip(idxs, res):
                out[i] = r
        try:
            if any(isinstance(r, REDIRECT) for r in out):
                client.nodes_manager.initialize()
        except Exception as exc:  # noqa: BLE001 - the answers stand; the tier reconnects
            return out, failed, exc
        return out, failed, None

    def probe(self, client: Any) -> bool:
        """Ping each down master whose turn has come; True if one is back. A master the refreshed
        topology no longer lists as a primary (its replica took over) is no longer down."""
        now = time.monotonic()
        with self._lock:
            due = [name for name, at in self._down.items() if at <= now]
        back = [name for name in due if _answers(client, client.get_node(node_name=name))]
        if len(back) < len(due):
            try:
                client.nodes_manager.initialize()  # a failover moves the slots: follow them
                primaries = {n.name for n in client.get_primaries()}
                back += [name for name in due if name not in primaries and name not in back]
            except Exception:  # noqa: BLE001, S110 - no node answers: the master stays down
                pass
        came = []
        with self._lock:
            for name in due:
                if name in back:
                    came += [name] if self._down.pop(name, None) is not None else []
                elif name in self._down:
                    self._down[name] = time.monotonic() + self.retry_interval
            self.recoveries += len(came)
        for name in came:
            log.info("redis cluster: master %s is back (it answers, or a replica took its slots)", name)
        return bool(back)

    def check(self, client: Any) -> None:
        """At (re)connect: ping every primary, mark the silent ones down; raise if none answers."""
        with self._lock:
            before = set(self._down)
            self._down.clear()
        primaries = client.get_primaries()
        for node in primaries:
            if not _answers(client, node):
                self.mark(node.name, "no answer to PING at connect", quiet=node.name in before)
        for name in sorted(before - set(self.down())):
            log.info("redis cluster: master %s is back (found at reconnect)", name)
        if len(self.down()) == len(primaries):
            raise MasterDown("no master of the cluster answers")

    def close(self) -> None:
        self._pool.shutdown(wait=False)


def _send(client: Any, node: Any, ops: list[Op], run: Runner) -> list[Any] | Exception:
    try:
        return run(client.get_redis_connection(node), ops)
    except Exception as exc:  # noqa: BLE001 - this master's commands failed, not the others'
        return exc


def _answers(client: Any, node: Any) -> bool:
    try:
        return node is not None and bool(client.get_redis_connection(node).ping())
    except Exception:  # noqa: BLE001 - any failure: still down
        return False
