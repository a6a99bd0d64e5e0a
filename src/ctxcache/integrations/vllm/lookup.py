"""How vLLM's scheduler process sees the store: a lookup service over a Unix socket.

vLLM runs the scheduler in the engine-core process and the model (with the KV tensors) in worker
processes (on CPU always: its OMP setup forces the multiprocessing executor). The ContextCache
lives in the worker, next to the tensors it copies, so stores never cross a process boundary.
The scheduler asks "how many tokens of this prompt can you load?" over a Unix socket; the worker
answers with a real lookup, whose Match it keeps pinned (the "stash") until its load consumes it,
so a block cannot be evicted between the scheduler's decision and the worker's copy. A stash that
nobody consumes (the request was aborted, or vLLM's own prefix cache already had the tokens) is
dropped by the next step's metadata, or after ``ttl`` seconds at the latest.

Wire format: 4-byte little-endian length + JSON, one request and one reply per message. The socket
sits in a 0700 directory owned by the user, so only the same user can ask.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ...cache import ContextCache, Match
from ...keys import Tokens, as_token_array

log = logging.getLogger(__name__)
_LEN = struct.Struct("<I")
_MAX_MSG = 64 << 20  # 16 M tokens of JSON: far above any context length


def default_socket_path(engine_id: str) -> Path:
    """A short per-engine path (Unix socket paths are limited to ~107 bytes)."""
    d = Path(tempfile.gettempdir()) / f"ctxcache-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    safe = "".join(c for c in engine_id if c.isalnum() or c in "-_")[:36] or "engine"
    return d / f"vllm-{safe}.sock"


def _send(sock: socket.socket, obj: Any) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("lookup socket closed")
        buf += chunk
    return bytes(buf)


def _recv(sock: socket.socket) -> Any:
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if n > _MAX_MSG:
        raise ConnectionError(f"lookup message of {n} B exceeds {_MAX_MSG} B")
    return json.loads(_recv_exact(sock, n))


class Stash:
    """Matches pinned by scheduler lookups, waiting for the worker's load. Thread-safe."""

    def __init__(self, cache: ContextCache, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache, self.ttl, self.clock = cache, ttl, clock
        self._lock = threading.Lock()
        self._items: dict[str, tuple[Match, bytes, float]] = {}
        # The hit a Match is good for (hybrid KV groups cut it back, groups.py); None: all of it.
        self.usable: Callable[[Match], int] | None = None
        # The scheduler waits for every lookup before it schedules the request: its share of TTFT.
        self.lookups, self.lookup_s, self.lookup_max_s = 0, 0.0, 0.0

    def lookup(self, req_id: str, tenant: str, tokens: Tokens) -> int:
        """Look ``tokens`` up, keep the Match for ``req_id`` (replacing an older one); hit tokens."""
        t0 = time.perf_counter()
        arr = as_token_array(tokens)
        match = self.cache.lookup(arr, tenant)
        key = arr[: match.hit_tokens].tobytes()
        dt = time.perf_counter() - t0
        with self._lock:
            old = self._items.pop(req_id, None)
            self._items[req_id] = (match, key, self.clock())
            self.lookups += 1
            self.lookup_s += dt
            self.lookup_max_s = max(self.lookup_max_s, dt)
        if old is not None:
            self._release(old[0])
        self.expire()
        return match.hit_tokens if self.usable is None else min(match.hit_tokens, self.usable(match))

    def take(self, req_id: str, tokens: Tokens) -> Match | None:
        """The stashed Match for ``req_id`` if its tokens and ``tokens`` agree as far as both go (the
        Match may hold more than the load needs: a tensor-parallel rank's hit beyond what every
        rank holds, ranks.py); the caller releases it."""
        with self._lock:
            item = self._items.pop(req_id, None)
        if item is None:
            return None
        match, key, _ = item
        arr = as_token_array(tokens)[: match.hit_tokens].tobytes()
        if arr != key[: len(arr)]:
            self._release(match)
            return None
        return match

    def drop(self, req_ids: list[str]) -> None:
        with self._lock:
            gone = [self._items.pop(r) for r in req_ids if r in self._items]
        for match, _, _ in gone:
            self._release(match)

    def expire(self) -> None:
        now = self.clock()
        with self._lock:
            old = [r for r, (_, _, t) in self._items.items() if now - t > self.ttl]
        self.drop(old)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def close(self) -> None:
        with self._lock:
            items, self._items = list(self._items.values()), {}
        for match, _, _ in items:
            self._release(match)

    def _release(self, match: Match) -> None:
        if not match.released:
            self.cache.release(match)


class LookupServer:
    """Serves scheduler lookups from the worker's cache on a Unix socket (one thread per client)."""

    def __init__(self, stash: Stash, path: Path, stats: Callable[[], dict[str, Any]]) -> None:
        self.stash, self.path, self._stats = stash, Path(path), stats
        self.path.unlink(missing_ok=True)  # a socket left by a killed engine
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._sock.listen(8)
        self._closed = False
        threading.Thread(target=self._accept, name="ctxcache-lookup", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="ctxcache-lookup-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while not self._closed:
                try:
                    msg = _recv(conn)
                except (ConnectionError, OSError, ValueError):
                    return
                try:
                    reply = self._handle(msg)
                except Exception as exc:  # a bad request must not kill the service: answer a miss
                    log.warning("ctxcache lookup failed: %s", exc)
                    reply = {"hit": 0, "error": str(exc)}
                try:
                    _send(conn, reply)
                except OSError:
                    return

    def _handle(self, msg: Any) -> dict[str, Any]:
        if not isinstance(msg, dict):
            raise ValueError("a lookup message is a JSON object")
        op = msg.get("op")
        if op == "lookup":
            tokens = np.asarray(msg["tokens"], dtype=np.int64)
            return {"hit": self.stash.lookup(str(msg["req"]), str(msg["ns"]), tokens)}
        if op == "stats":
            return {"stats": self._stats()}
        raise ValueError(f"unknown op {op!r}")

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        finally:
            self.path.unlink(missing_ok=True)


class LookupClient:
    """The scheduler's side: a hit count per request, 0 when the worker cannot be reached."""

    def __init__(self, path: Path, timeout: float = 5.0) -> None:
        self.path, self.timeout = Path(path), timeout
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self.errors = 0

    def _call(self, msg: dict[str, Any]) -> Any:
        with self._lock:
            for attempt in (0, 1):  # one reconnect: the worker may have restarted its service
                try:
                    if self._sock is None:
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        s.settimeout(self.timeout)
                        s.connect(str(self.path))
                        self._sock = s
                    _send(self._sock, msg)
                    return _recv(self._sock)
                except (OSError, ConnectionError, ValueError):
                    self._close_sock()
                    if attempt:
                        raise
        raise AssertionError("unreachable")

    def lookup(self, req_id: str, tenant: str, tokens: list[int]) -> int:
        try:
            reply = self._call({"op": "lookup", "req": req_id, "ns": tenant, "tokens": tokens})
        except (OSError, ConnectionError, ValueError) as exc:
            self.errors += 1
            log.warning("ctxcache lookup service unreachable at %s (%s): treating as a miss", self.path, exc)
            return 0
        hit = reply.get("hit", 0) if isinstance(reply, dict) else 0
        return int(hit) if isinstance(hit, int) and hit >= 0 else 0

    def stats(self) -> dict[str, Any]:
        reply = self._call({"op": "stats"})
        return dict(reply["stats"])

    def _close_sock(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def close(self) -> None:
        with self._lock:
            self._close_sock()
