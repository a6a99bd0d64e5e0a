"""The publisher's fast lane: a batch's XADD sent on the emitter's thread, its reply read later.

Under a steady load the publisher's thread cost a wake-up per batch, and each of its syscalls (the
XADD's send, the wait for its reply) handed the GIL to a busy request thread and took it back by a
forced switch: ~50 µs of CPU each on a loaded 2-core machine, four or five per batch
(docs/events.md, "Where the store's cost went"). Here ``StreamsPublisher.publish``, on the
emitter's thread and under the publisher's lock, sends the XADD itself, non-blocking, with the GIL
held (``ctxcache._native.fd_send``), and reads the replies that have come (``fd_recv``) at the next
batch; the publisher's thread reads what is left when no batch follows. The stream gets the same
entries, in the same order.

Only while everything is well: redis-py's single-node client, Redis answering, nothing queued for
the thread (it writes after the lane's replies are in, so the entries stay in order), fewer than
``MAX_INFLIGHT`` replies outstanding. A send that does not go out whole, a connection error or an
error reply closes the lane: its unanswered batches count as dropped, the publisher writes a fresh
snapshot (consumers that see the gap rebuild from it), and the batch goes the thread's way.
"""

from __future__ import annotations

import select
import sys
import time
from collections import deque
from typing import Any

from .. import accel
from .codec import encode_events
from .model import EventBatch

MAX_INFLIGHT = 64  # replies outstanding; more (Redis slow): batches go to the thread's queue
REAP_S = 0.1  # the publisher's thread reads replies this old (no batch came to read them)


def _bulk(x: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(x), x)


class LaneError(ConnectionError):
    """The fast lane's connection failed or Redis answered an error: the lane is closed."""


class FastLane:
    """Raw XADDs on a connection of its own from the client's pool (redis-py did the handshake:
    AUTH, SELECT), made non-blocking. Not thread-safe: the publisher's lock guards it."""

    def __init__(self, client: Any, stream: str, maxlen: int, registry: str, worker: str) -> None:
        self.pool = client.connection_pool
        self.head = b"*14\r\n$4\r\nXADD\r\n" + _bulk(stream.encode()) + b"$6\r\nMAXLEN\r\n$1\r\n~\r\n"
        self.head += _bulk(str(maxlen).encode()) + b"$1\r\n*\r\n"
        self.zadd = b"*4\r\n$4\r\nZADD\r\n" + _bulk(registry.encode())
        self.member = _bulk(worker.encode())
        self.conn: Any = None
        self.sock: Any = None
        self.fd = -1
        self.inflight: deque[tuple[EventBatch | None, float]] = deque()  # None: a ZADD's reply
        self.buf = bytearray()
        usable = accel.native is not None and hasattr(accel.native, "fd_send") and sys.platform != "win32"
        self.native = accel.native if usable else None  # else Python's socket calls (they release the GIL)

    def command(self, b: EventBatch, register: bool) -> bytes:
        """The XADD (as redis-py writes ``xadd(stream, {q, e, t, v}, maxlen, approximate)``), and
        the registry's ZADD when due."""
        out = [self.head, b"$1\r\nq\r\n", _bulk(b"%d" % b.seq), b"$1\r\ne\r\n", _bulk(b.epoch.encode())]
        out += [b"$1\r\nt\r\n", _bulk(repr(b.ts).encode()), b"$1\r\nv\r\n", _bulk(encode_events(b.events))]
        if register:
            out += [self.zadd, _bulk(repr(time.time()).encode()), self.member]
        return b"".join(out)

    def send(self, b: EventBatch, register: bool) -> list[tuple[EventBatch | None, Any]]:
        """Send ``b``'s XADD; returns the replies that had come for earlier sends (raises LaneError)."""
        data = self.command(b, register)  # first: a batch the encoder refuses leaves the lane as it was
        if self.conn is None:
            self._open()
        done = self.reap()
        try:
            sent = self.native.fd_send(self.fd, data) if self.native is not None else self.sock.send(data)
        except (OSError, ValueError) as exc:
            raise LaneError(f"send failed: {exc}") from exc
        if sent != len(data):  # the socket's buffer is full: Redis is slow (or the command is huge)
            raise LaneError(f"sent {sent} of {len(data)} bytes")
        now = time.monotonic()
        self.inflight.append((b, now))
        if register:
            self.inflight.append((None, now))
        return done

    def reap(self) -> list[tuple[EventBatch | None, Any]]:
        """The replies that have come, each with its batch (None: a ZADD's), without waiting."""
        out: list[tuple[EventBatch | None, Any]] = []
        while self.inflight:
            got = self._parse()
            if got is None:
                data = self._recv()
                if data is None:
                    break
                self.buf += data
                continue
            b, _ = self.inflight.popleft()
            out.append((b, got))
        return out

    def wait(self, timeout: float) -> bool:
        """Until a reply can be read (the publisher's thread, without its lock): False on timeout."""
        fd = self.fd
        if fd < 0:
            return True
        try:
            return bool(select.select([fd], [], [], timeout)[0])
        except (OSError, ValueError):
            return True  # closed meanwhile: the next reap under the lock sees to it

    def oldest(self) -> float | None:
        return self.inflight[0][1] if self.inflight else None

    def close(self) -> list[EventBatch]:
        """Drop the connection; returns the batches whose replies never came."""
        lost = [b for b, _ in self.inflight if b is not None]
        self.inflight.clear()
        self.buf.clear()
        conn, self.conn, self.sock, self.fd = self.conn, None, None, -1
        if conn is not None:
            conn.disconnect()
            self.pool.release(conn)
        return lost

    def _open(self) -> None:
        try:
            conn = self.pool.get_connection()
        except Exception as exc:  # noqa: BLE001 - redis-py's and socket errors alike
            raise LaneError(f"connect failed: {exc}") from exc
        sock = getattr(conn, "_sock", None)
        if sock is None:
            self.pool.release(conn)
            raise LaneError("no socket")
        sock.setblocking(False)
        self.conn, self.sock, self.fd = conn, sock, sock.fileno()

    def _recv(self) -> bytes | None:
        try:
            data = self.native.fd_recv(self.fd, 65536) if self.native is not None else self.sock.recv(65536)
        except BlockingIOError:
            return None
        except (OSError, ValueError) as exc:
            raise LaneError(f"receive failed: {exc}") from exc
        if data == b"":
            raise LaneError("Redis closed the connection")
        return data  # type: ignore[no-any-return]

    def _parse(self) -> Any:
        """One RESP2 reply off the buffer: bytes (an entry id), int (ZADD), or None: incomplete.
        An error reply raises LaneError."""
        buf = self.buf
        end = buf.find(b"\r\n")
        if end < 0:
            return None
        kind, line = buf[0], bytes(buf[1:end])
        if kind == 0x24:  # $: bulk string
            n = int(line)
            if n < 0:
                del buf[: end + 2]
                return b""
            if len(buf) < end + 4 + n:
                return None
            out = bytes(buf[end + 2 : end + 2 + n])
            del buf[: end + 4 + n]
            return out
        del buf[: end + 2]
        if kind == 0x3A:  # ":": an integer
            return int(line)
        if kind == 0x2B:  # "+": a status
            return line
        raise LaneError(f"Redis answered {line.decode(errors='replace')!r}")
