"""Redis Cluster round trips for RedisTier: one plain pipeline per master.

redis-py's cluster pipeline re-sends failed commands one at a time, which would multiply the
timeout; here each master gets one pipeline of its keys' commands, a MOVED reply is a miss (the
topology is refreshed once), and a master that fails answers its own commands with its error.
"""

from __future__ import annotations

from collections.abc import Callable
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

Op = tuple[str, tuple[Any, ...], dict[str, Any]]  # a command: name, args, kwargs
Runner = Callable[[Any, list[Op]], list[Any]]  # sends one pipeline to one server

__all__ = [
    "DOWN",
    "REDIRECT",
    "NoBackoff",
    "Op",
    "RedisCluster",
    "Retry",
    "Runner",
    "run_cluster",
    "redis_py",
    "run_pipeline",
]


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


def run_cluster(client: Any, todo: list[Op], partial: bool, run: Runner) -> tuple[list[Any], Exception | None]:
    """The answers, and the first "unreachable" error seen (for the tier's health). The first master
    that fails ends the call (a request waits one timeout at most), unless ``partial``: then every
    master is tried (the mover's deletes: one master down frees the rest)."""
    groups: dict[str, tuple[Any, list[int]]] = {}
    for i, (_, args, _) in enumerate(todo):
        node = client.get_node_from_key(args[0])
        groups.setdefault(node.name, (node, []))[1].append(i)
    out: list[Any] = [None] * len(todo)
    down: Exception | None = None
    for node, idxs in groups.values():
        try:
            res = run(client.get_redis_connection(node), [todo[i] for i in idxs])
        except Exception as exc:  # noqa: BLE001 - this master's commands failed, not the others'
            if not partial:
                raise
            down, res = down or exc, [exc] * len(idxs)
        for i, r in zip(idxs, res):
            out[i] = r
    try:
        if any(isinstance(r, REDIRECT) for r in out):
            client.nodes_manager.initialize()
    except Exception as exc:  # noqa: BLE001 - the answers stand; the tier reconnects
        down = down or exc
    return out, down
