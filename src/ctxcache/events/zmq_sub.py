"""Follow a vLLM (or ctxcache) ZMQ KV-event endpoint as ctxcache :class:`EventBatch` objects.

vLLM's protocol has no worker epoch, only a sequence from 0 per publisher start, so the
subscriber makes its own epochs: each begins with a :class:`WorkerStarted` batch (consumers
forget what they knew of the endpoint), and a new one begins when the publisher restarted (the
sequence went back) or when a gap could not be filled by replay (a missed removal would leave a
stale "holds this block" forever otherwise). Output ``seq`` counts from 1 per epoch, gapless.

Garbled input (wrong frames, undecodable payload, a limit broken) is counted and skipped; the
sequence logic then treats it as missing. Nothing a publisher sends can end the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import zmq

from ..errors import EventDecodeError
from .model import BlockStored, Event, EventBatch, TierCleared, WorkerStarted, new_epoch
from .vllm_format import ALL_TIERS, DEFAULT_LIMITS, DecodedBatch, Limits, decode_vllm

log = logging.getLogger("ctxcache.events.zmq")

DEFAULT_MAX_FRAME = 16 << 20


@dataclass
class ZmqSubscriberStats:
    received: int = 0  # well-formed messages decoded, live or replayed
    garbled: int = 0  # messages or replay replies dropped as malformed
    unknown_events: int = 0  # events of a type this version does not know
    gaps: int = 0
    replays: int = 0  # replay requests sent
    replayed: int = 0  # batches recovered by replay
    unrecovered: int = 0  # gaps replay could not fill: a fresh epoch was started
    restarts: int = 0  # the publisher's sequence went back


class ZmqSubscriber:
    """SUB socket on ``endpoint`` (connects), replay through ``replay_endpoint`` (a DEALER).

    ``worker``: the name batches carry (default: the endpoint). ``token_ids``: keep the tokens
    BlockStored events carry (a router recomputing keys needs them); off, they are dropped.
    ``fold64``: name blocks by their low 64 bits whatever form the publisher sent.
    ``replay_on_join``: ask for the publisher's whole ring when the first message is not seq 0.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        replay_endpoint: str | None = None,
        topic: str = "",
        worker: str | None = None,
        token_ids: bool = False,
        fold64: bool = False,
        replay_on_join: bool = False,
        replay_timeout: float = 1.0,
        max_frame: int = DEFAULT_MAX_FRAME,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
        epochs: Callable[[], str] = new_epoch,
    ) -> None:
        self.stats = ZmqSubscriberStats()
        self.worker = worker or endpoint
        self._token_ids, self._fold64, self._limits = token_ids, fold64, limits
        self._replay_on_join, self._replay_timeout = replay_on_join, replay_timeout
        self._clock, self._epochs = clock, epochs
        self._max_frame = max_frame
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.MAXMSGSIZE, max_frame)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self._sub.connect(endpoint)
        self._replay_endpoint = replay_endpoint
        self._dealer: zmq.Socket[bytes] | None = None
        self._last: int | None = None  # publisher sequence of the last batch applied
        self._epoch = ""
        self._seq = 0  # our output sequence within self._epoch
        self._fresh = True  # nothing but WorkerStarted emitted in this epoch yet
        self._tiers: set[str] = set()
        self._closed = False

    # -- public ----------------------------------------------------------------------------

    def poll(self, timeout: float | None = 1.0) -> list[EventBatch]:
        """Wait up to ``timeout`` seconds (None: forever) for one message; the batches it yields
        (none for a duplicate or garbled one, several after a replay or an epoch change)."""
        ms = None if timeout is None else max(0, int(timeout * 1000))
        if not self._sub.poll(ms):
            return []
        try:
            frames = self._sub.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return []
        return self.on_message(frames)

    def __iter__(self) -> Iterator[EventBatch]:
        while not self._closed:
            yield from self.poll(0.5)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._sub.close(0)
        if self._dealer is not None:
            self._dealer.close(0)
        self._ctx.term()

    # -- sequencing ------------------------------------------------------------------------

    def on_message(self, frames: list[bytes]) -> list[EventBatch]:
        """Apply one PUB message's frames (public so a caller polling several sockets itself can
        feed it)."""
        parsed = self._frames(frames)
        if parsed is None:
            return []
        seq, payload = parsed
        out: list[EventBatch] = []
        if self._last is None or seq <= self._last:
            if self._last is not None:
                self.stats.restarts += 1
                log.info("KV-event publisher %s restarted (seq %d after %d)", self.worker, seq, self._last)
            out += self._start_epoch()
            expected = 0 if (self._replay_on_join or self._last is not None) else seq
            self._last = expected - 1
        expected = self._last + 1
        if seq > expected:
            out += self._fill(expected, seq)
        decoded = self._decode(payload)
        if decoded is not None:
            out += self._apply(seq, decoded)
        return out

    def _fill(self, first: int, end: int) -> list[EventBatch]:
        """Batches ``first..end-1`` from the replay endpoint; a hole left in them starts a new
        epoch after the part before it (the part after it is still true, and kept)."""
        self.stats.gaps += 1
        got = self._replay(first, end)
        out: list[EventBatch] = []
        for seq in range(first, end):
            decoded = self._decode(got[seq]) if seq in got else None
            if decoded is None:
                if not self._fresh:
                    self.stats.unrecovered += 1
                    log.warning("KV events %d..%d from %s lost: starting a new epoch", seq, end - 1, self.worker)
                    out += self._start_epoch()
                continue
            self.stats.replayed += 1
            out += self._apply(seq, decoded)
        self._last = end - 1
        return out

    def _start_epoch(self) -> list[EventBatch]:
        self._epoch, self._seq, self._fresh = self._epochs(), 1, True
        self._tiers.clear()
        return [EventBatch(self.worker, self._epoch, 1, (WorkerStarted(),))]

    def _apply(self, seq: int, decoded: DecodedBatch) -> list[EventBatch]:
        self._last = seq
        self._seq += 1
        self._fresh = False
        self.stats.unknown_events += decoded.unknown
        return [EventBatch(self.worker, self._epoch, self._seq, self._events(decoded.events), decoded.ts)]

    def _events(self, events: tuple[Event, ...]) -> tuple[Event, ...]:
        out: list[Event] = []
        for ev in events:
            if isinstance(ev, TierCleared) and ev.tier == ALL_TIERS:
                out += [TierCleared(t, ev.reason) for t in sorted(self._tiers)]
                continue
            if isinstance(ev, BlockStored):
                self._tiers.add(ev.tier)
                if not self._token_ids and ev.token_ids is not None:
                    ev = replace(ev, token_ids=None)
            out.append(ev)
        return tuple(out)

    # -- wire ------------------------------------------------------------------------------

    def _frames(self, frames: list[bytes]) -> tuple[int, bytes] | None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self.stats.garbled += 1
            return None
        return int.from_bytes(frames[1], "big", signed=True), frames[2]

    def _decode(self, payload: bytes) -> DecodedBatch | None:
        try:
            decoded = decode_vllm(payload, limits=self._limits, fold64=self._fold64)
        except EventDecodeError as exc:
            self.stats.garbled += 1
            log.debug("garbled KV-event batch from %s: %s", self.worker, exc)
            return None
        self.stats.received += 1
        return decoded

    def _replay_socket(self) -> zmq.Socket[bytes]:
        if self._dealer is None:
            self._dealer = self._ctx.socket(zmq.DEALER)
            self._dealer.setsockopt(zmq.MAXMSGSIZE, self._max_frame)
            self._dealer.setsockopt(zmq.LINGER, 0)
            assert self._replay_endpoint is not None
            self._dealer.connect(self._replay_endpoint)
        return self._dealer

    def _replay(self, first: int, end: int) -> dict[int, bytes]:
        """Payloads ``first..end-1`` the publisher still holds, within ``replay_timeout``."""
        if self._replay_endpoint is None:
            return {}
        self.stats.replays += 1
        sock = self._replay_socket()
        sock.send_multipart((b"", first.to_bytes(8, "big", signed=True)))
        got: dict[int, bytes] = {}
        deadline = self._clock() + self._replay_timeout
        while (left := deadline - self._clock()) > 0:
            if not sock.poll(max(1, int(left * 1000))):
                break
            reply = sock.recv_multipart()
            # [b"", topic, seq, payload] (vllm 0.32) or [b"", seq, payload] (older vLLM).
            reply = reply[1:] if reply and reply[0] == b"" else reply
            reply = reply[1:] if len(reply) == 3 else reply
            if len(reply) != 2 or len(reply[0]) != 8:
                self.stats.garbled += 1
                continue
            seq = int.from_bytes(reply[0], "big", signed=True)
            if seq == -1:
                return got
            if first <= seq < end:
                got[seq] = reply[1]
        # No end marker in time: a late answer to this request must not be read as the next
        # one's, so the socket goes.
        sock.close(0)
        self._dealer = None
        return got
