"""KV events over ZMQ in vLLM's wire protocol (docs/events-vllm.md), so vLLM-event consumers
(llm-d's indexer, Dynamo's router, vLLM's example subscriber) can follow a ctxcache worker, and
ctxcache can follow a vLLM engine.

Protocol, as vLLM's publisher speaks it: a PUB socket sends multipart ``(topic, seq, payload)``
with ``seq`` an 8-byte big-endian counter from 0 and ``payload`` one msgpack KVEventBatch; a
ROUTER socket answers a request whose last frame is an 8-byte start sequence with every buffered
``(topic, seq, payload)`` from there on, then ``(b"", -1, b"")`` (vllm 0.32's replies; older
vLLM left the topic out, and the subscriber reads both).

:class:`ZmqSink` is an events sink (``publish(batch)`` never blocks: a bounded queue, overflow
dropped and counted; ``close()``). The ZMQ sequence is the batch's own ``seq - 1``, so a batch the
sink dropped shows as a gap a consumer can see. :class:`ZmqSubscriber` (events/zmq_sub.py) reads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from collections import deque
from dataclasses import dataclass

import zmq

from .model import EventBatch
from .vllm_format import Encoding, HashForm, encode_vllm

log = logging.getLogger("ctxcache.events.zmq")

END_SEQ = (-1).to_bytes(8, "big", signed=True)
_POLL_MS = 1000  # idle wake-up, only to notice a close that lost its wake byte


@dataclass
class ZmqSinkStats:
    published: int = 0
    dropped: int = 0  # queue full: the batch never went out (consumers see a gap)
    errors: int = 0  # a batch that failed to encode or send
    replay_requests: int = 0
    replayed: int = 0  # batches sent back to replay requests
    bad_requests: int = 0


class ZmqSink:
    """Publishes ctxcache event batches on a ZMQ PUB socket in vLLM's KV-event format.

    ``endpoint`` / ``replay_endpoint`` are bound (the worker is the stable end; consumers
    connect); a port ``*`` picks a free one, read back from :attr:`endpoint`. One background
    thread owns both sockets, encodes and sends, and answers replay requests from a ring of
    the last ``buffer_steps`` batches. ``token_ids``: send the tokens a BlockStored carries
    (every subscriber then sees prompt tokens); off, the sink strips them whatever it is given.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        replay_endpoint: str | None = None,
        topic: str = "",
        buffer_steps: int = 10_000,
        max_queue: int = 10_000,
        hwm: int = 100_000,
        encoding: Encoding = "map",
        hashes: HashForm = "int",
        token_ids: bool = False,
        data_parallel_rank: int = 0,
    ) -> None:
        if buffer_steps < 1 or max_queue < 1:
            raise ValueError("buffer_steps and max_queue must be positive")
        self.stats = ZmqSinkStats()
        self._queue: queue.Queue[EventBatch] = queue.Queue(maxsize=max_queue)
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._topic = topic.encode()
        self._encode_args = {
            "encoding": encoding,
            "hashes": hashes,
            "token_ids": token_ids,
            "data_parallel_rank": data_parallel_rank,
        }
        self._hwm = hwm
        self._epoch: str | None = None
        self._stop = threading.Event()
        self._drop_lock = threading.Lock()
        # A pipe wakes the thread's poller for a publish: no busy loop, no lock shared with ZMQ.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._ready = threading.Event()
        self._bind_error: BaseException | None = None
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self._thread = threading.Thread(target=self._run, name="ctxcache-zmq-sink", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._bind_error is not None:
            self._thread.join()
            self._close_pipe()
            raise self._bind_error

    # -- the sink protocol (any thread) ---------------------------------------------------

    def publish(self, batch: EventBatch) -> None:
        if self._stop.is_set():
            return
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            with self._drop_lock:
                self.stats.dropped += 1
            return
        self._wake()

    def close(self, timeout: float = 2.0) -> None:
        """Send what is queued (up to ``timeout``), then close the sockets."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._wake()
        self._thread.join(timeout)
        if not self._thread.is_alive():  # a stuck thread still polls the pipe: leave it open
            self._close_pipe()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"\0")

    def _close_pipe(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the thread ------------------------------------------------------------------------

    def _open(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes] | None]:
        pub = ctx.socket(zmq.PUB)
        pub.setsockopt(zmq.SNDHWM, self._hwm)
        pub.setsockopt(zmq.LINGER, 500)
        pub.bind(self.endpoint)
        self.endpoint = pub.getsockopt_string(zmq.LAST_ENDPOINT)
        router = None
        if self.replay_endpoint is not None:
            router = ctx.socket(zmq.ROUTER)
            # A replay is one burst of up to buffer_steps messages: room for all of them, so
            # the ROUTER does not silently drop the tail of a long one.
            router.setsockopt(zmq.SNDHWM, 2 * (self._ring.maxlen or 1) + 16)
            router.setsockopt(zmq.LINGER, 0)
            router.setsockopt(zmq.MAXMSGSIZE, 4096)
            router.bind(self.replay_endpoint)
            self.replay_endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
        return pub, router

    def _run(self) -> None:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        sockets: list[zmq.Socket[bytes]] = []
        try:
            try:
                pub, router = self._open(ctx)
                sockets = [pub] + ([router] if router is not None else [])
            except zmq.ZMQError as exc:
                self._bind_error = OSError(f"cannot bind ZMQ KV-event endpoint: {exc}")
                return
            finally:
                self._ready.set()
            self._loop(pub, router)
        finally:
            for s in sockets:
                s.close()
            ctx.term()

    def _loop(self, pub: zmq.Socket[bytes], router: zmq.Socket[bytes] | None) -> None:
        poller = zmq.Poller()
        poller.register(self._wake_r, zmq.POLLIN)
        if router is not None:
            poller.register(router, zmq.POLLIN)
        while True:
            ready = dict(poller.poll(_POLL_MS))
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError, OSError):
                    os.read(self._wake_r, 65536)
            self._drain(pub)
            if router is not None and router in ready:
                self._serve_replays(router)
            if self._stop.is_set():
                self._drain(pub)
                return

    def _drain(self, pub: zmq.Socket[bytes]) -> None:
        while True:
            try:
                batch = self._queue.get_nowait()
            except queue.Empty:
                return
            self._send(pub, batch)

    def _send(self, pub: zmq.Socket[bytes], batch: EventBatch) -> None:
        if batch.epoch != self._epoch:
            # A new epoch restarts the sequence at 0: the old epoch's ring would answer a
            # replay with batches of a life that is over.
            self._epoch = batch.epoch
            self._ring.clear()
        seq = batch.seq - 1
        try:
            payload = encode_vllm(batch, **self._encode_args)  # type: ignore[arg-type]
            pub.send_multipart((self._topic, seq.to_bytes(8, "big", signed=True), payload), copy=False)
        except (ValueError, TypeError, OverflowError, zmq.ZMQError) as exc:
            self.stats.errors += 1
            log.warning("KV-event batch %d not published: %s", batch.seq, exc)
            return
        self._ring.append((seq, payload))
        self.stats.published += 1

    def _serve_replays(self, router: zmq.Socket[bytes]) -> None:
        while True:
            try:
                frames = router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._serve_replay(router, frames)

    def _serve_replay(self, router: zmq.Socket[bytes], frames: list[bytes]) -> None:
        # [identity, b"", seq] from a REQ (vLLM's example) or a DEALER that adds the empty
        # delimiter; [identity, seq] from a bare DEALER. Replies reuse the request's envelope.
        self.stats.replay_requests += 1
        if len(frames) not in (2, 3) or (len(frames) == 3 and frames[1] != b""):
            self.stats.bad_requests += 1
            return
        envelope, start = frames[:-1], frames[-1]
        if len(start) != 8:
            self.stats.bad_requests += 1
            router.send_multipart((*envelope, b"", END_SEQ, b""))
            return
        first = int.from_bytes(start, "big", signed=True)
        try:
            for seq, payload in list(self._ring):
                if seq >= first:
                    router.send_multipart(
                        (*envelope, self._topic, seq.to_bytes(8, "big", signed=True), payload), copy=False
                    )
                    self.stats.replayed += 1
            router.send_multipart((*envelope, b"", END_SEQ, b""))
        except zmq.ZMQError as exc:
            log.warning("KV-event replay from %d cut short: %s", first, exc)
