"""ctxcache's ZMQ KV events over real sockets on 127.0.0.1: a vLLM-schema subscriber reads the
sink (live and by replay), ctxcache's subscriber follows it through missed ranges, a trimmed
ring, a publisher restart and garbled frames."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq

from ctxcache.events import BlockRemoved, BlockStored, EventBatch, Heartbeat, TierCleared, WorkerStarted
from ctxcache.events.zmq import ZmqSink
from ctxcache.events.zmq_sub import ZmqSubscriber

from .test_vllm_format import Batch

FIX = Path(__file__).parent / "fixtures"
LOCAL = "tcp://127.0.0.1:*"


def key(i: int) -> bytes:
    return i.to_bytes(16, "big")


def stored(seq: int, epoch: str = "e1", tokens: tuple[int, ...] | None = None) -> EventBatch:
    return EventBatch("w", epoch, seq, (BlockStored((key(seq),), "ram", key(seq - 1), 16, 64, tokens),), ts=float(seq))


@pytest.fixture
def sink() -> Iterator[ZmqSink]:
    s = ZmqSink(LOCAL, replay_endpoint=LOCAL, topic="kv-events")
    yield s
    s.close()


def subscribe(s: ZmqSink, **kw: object) -> ZmqSubscriber:
    sub = ZmqSubscriber(s.endpoint, replay_endpoint=s.replay_endpoint, topic="kv-events", worker="w", **kw)  # type: ignore[arg-type]
    time.sleep(0.3)  # PUB/SUB: a subscription reaches the publisher a moment after connect
    return sub


def drain(sub: ZmqSubscriber, want: int, timeout: float = 5.0) -> list[EventBatch]:
    out: list[EventBatch] = []
    end = time.monotonic() + timeout
    while (
        sum(1 for b in out if not (b.events and isinstance(b.events[0], WorkerStarted))) < want
        and time.monotonic() < end
    ):
        out += sub.poll(0.2)
    return out


def data(batches: list[EventBatch]) -> list[bytes]:
    return [ev.keys[0] for b in batches for ev in b.events if isinstance(ev, BlockStored)]


def test_a_vllm_schema_subscriber_reads_the_sink_live_and_by_replay(sink: ZmqSink) -> None:
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv-events")
    sub.setsockopt(zmq.RCVTIMEO, 5000)
    sub.connect(sink.endpoint)
    time.sleep(0.3)
    for seq in (1, 2, 3):
        sink.publish(stored(seq))
    decoder = msgspec.msgpack.Decoder(Batch)
    live = [sub.recv_multipart() for _ in range(3)]
    assert [m[0] for m in live] == [b"kv-events"] * 3
    assert [int.from_bytes(m[1], "big") for m in live] == [0, 1, 2]  # vLLM's sequence: from 0
    first = decoder.decode(live[0][2]).events[0]
    assert first.block_hashes == [int.from_bytes(key(1)[8:], "big")] and first.medium == "ram"
    # vLLM's replay request: the start sequence, 8 bytes big-endian, behind an empty frame.
    replay = ctx.socket(zmq.DEALER)
    replay.setsockopt(zmq.RCVTIMEO, 5000)
    replay.connect(sink.replay_endpoint or "")
    replay.send_multipart((b"", (1).to_bytes(8, "big")))
    got = []
    while (frames := replay.recv_multipart())[2] != b"\xff" * 8:
        assert frames[0] == b"" and frames[1] == b"kv-events"
        got.append((int.from_bytes(frames[2], "big"), decoder.decode(frames[3]).ts))
    assert got == [(1, 2.0), (2, 3.0)]
    ctx.destroy(0)


def test_subscriber_follows_the_sink(sink: ZmqSink) -> None:
    sub = subscribe(sink, token_ids=True)
    sink.publish(EventBatch("w", "e1", 1, (WorkerStarted(("ram",)),), 1.0))
    for seq in range(2, 6):
        sink.publish(stored(seq, tokens=(1, 2)))
    sink.publish(EventBatch("w", "e1", 6, (BlockRemoved((key(2),), "ram"), Heartbeat()), 6.0))
    out = drain(sub, 6)
    assert [b.seq for b in out] == list(range(1, 8)) and len({b.epoch for b in out}) == 1
    assert isinstance(out[0].events[0], WorkerStarted)
    assert data(out) == [key(s)[8:] for s in range(2, 6)]
    assert out[-1].events == (BlockRemoved((key(2)[8:],), "ram"),)
    assert all(
        ev.token_ids is None for b in out for ev in b.events if isinstance(ev, BlockStored)
    )  # sink did not opt in
    assert sub.stats.gaps == 0 and sub.stats.garbled == 0
    sub.close()


def test_a_missed_range_is_replayed(sink: ZmqSink) -> None:
    sub = subscribe(sink)
    for seq in range(1, 11):
        sink.publish(stored(seq))
    out = drain(sub, 2)
    # The consumer misses batches 3..7: taken off its socket unread.
    for _ in range(5):
        assert sub._sub.poll(5000)
        sub._sub.recv_multipart()
    out += drain(sub, 8)
    assert data(out) == [key(s)[8:] for s in range(1, 11)]
    assert [b.seq for b in out] == list(range(1, 12)) and len({b.epoch for b in out}) == 1
    assert (sub.stats.gaps, sub.stats.replays, sub.stats.replayed, sub.stats.unrecovered) == (1, 1, 5, 0)
    sub.close()


def test_a_range_trimmed_from_the_ring_starts_a_new_epoch() -> None:
    s = ZmqSink(LOCAL, replay_endpoint=LOCAL, buffer_steps=3)
    sub = ZmqSubscriber(s.endpoint, replay_endpoint=s.replay_endpoint, worker="w")
    time.sleep(0.3)
    s.publish(stored(1))
    out = drain(sub, 1)
    for seq in range(2, 9):
        s.publish(stored(seq))
    for _ in range(6):  # misses 2..7; the ring still holds only 6..8
        assert sub._sub.poll(5000)
        sub._sub.recv_multipart()
    out += drain(sub, 1)
    epochs = list(dict.fromkeys(b.epoch for b in out))
    assert len(epochs) == 2 and sub.stats.unrecovered == 1
    second = [b for b in out if b.epoch == epochs[1]]
    # The new epoch opens with WorkerStarted (consumers forget batch 1's store), then what is
    # still true: 6 and 7 from the ring, 8 live.
    assert isinstance(second[0].events[0], WorkerStarted) and second[0].seq == 1
    assert data(second) == [key(s)[8:] for s in (6, 7, 8)]
    sub.close()
    s.close()


def test_a_restarted_publisher_starts_a_new_epoch() -> None:
    s = ZmqSink("tcp://127.0.0.1:*")
    endpoint = s.endpoint
    sub = ZmqSubscriber(endpoint, worker="w")
    time.sleep(0.3)
    for seq in (1, 2, 3):
        s.publish(stored(seq))
    out = drain(sub, 3)
    s.close()
    s = ZmqSink(endpoint)  # the same address, a new life: its sequence starts at 0 again
    # The subscriber reconnects by itself; libzmq attaches the new connection (and resends the
    # subscription) when the socket is next used, as a consumer's loop does all the time.
    assert sub.poll(0.5) == []
    s.publish(EventBatch("w", "e2", 1, (WorkerStarted(("ram",)),), 9.0))
    s.publish(stored(2, epoch="e2"))
    out += drain(sub, 5)
    assert sub.stats.restarts == 1
    epochs = list(dict.fromkeys(b.epoch for b in out))
    assert len(epochs) == 2
    assert [b.seq for b in out if b.epoch == epochs[1]] == [1, 2, 3]
    sub.close()
    s.close()


def test_garbled_frames_are_counted_and_the_loop_goes_on() -> None:
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    sub = ZmqSubscriber(f"tcp://127.0.0.1:{port}", worker="vllm")
    time.sleep(0.3)
    good = [bytes.fromhex(m[2]) for m in json.loads((FIX / "vllm-0.32-zmq.json").read_text())["live"]]
    seq = [i.to_bytes(8, "big") for i in range(6)]
    for frames in (
        [b"", seq[0], good[0]],
        [b"", seq[1]],  # two frames
        [b"", b"\x01" * 9, good[1]],  # a 9-byte sequence
        [b"", seq[1], good[1]],
        [b"", seq[2], b"\xc1garbage"],  # not msgpack: batch 2 is lost
        [b"", seq[3], b"\x91" * 100_000],  # nested past any depth: batch 3 too
        [b"", seq[4], good[2]],
    ):
        pub.send_multipart(frames)
    out = drain(sub, 3)
    assert sub.stats.garbled == 4
    # 0 and 1 in the first epoch; after 2 and 3 were lost (no replay endpoint to ask), 4 in a
    # second one, so no consumer keeps what 2 or 3 might have removed.
    epochs = list(dict.fromkeys(b.epoch for b in out))
    assert len(epochs) == 2 and sub.stats.unrecovered == 1
    last = [b for b in out if b.epoch == epochs[1]]
    assert isinstance(last[0].events[0], WorkerStarted)
    assert isinstance(last[1].events[0], BlockRemoved) and last[1].events[0].tier == "GPU"
    pub.close(0)
    sub.close()
    ctx.term()


def test_publish_never_blocks_overflow_is_counted() -> None:
    s = ZmqSink(LOCAL, max_queue=1)
    n = 5000
    t0 = time.perf_counter()
    for seq in range(1, n + 1):
        s.publish(stored(seq))
    elapsed = time.perf_counter() - t0
    s.close()
    assert s.stats.dropped > 0 and s.stats.published + s.stats.dropped == n
    assert elapsed < 5.0
    s.publish(stored(n + 1))  # after close: a no-op, not an error
    assert s.stats.published + s.stats.dropped == n


def test_bad_replay_requests_are_counted_not_fatal(sink: ZmqSink) -> None:
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 3000)
    dealer.connect(sink.replay_endpoint or "")
    dealer.send_multipart((b"", b"short"))
    assert dealer.recv_multipart()[-2] == b"\xff" * 8  # answered with the end marker at once
    dealer.send_multipart((b"x", b"y", b"z", b"w"))
    sink.publish(stored(1))
    deadline = time.monotonic() + 10  # publish hands the batch to the sink's thread: in the ring once sent
    while sink.stats.published < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    dealer.send_multipart((b"", (0).to_bytes(8, "big")))
    reply = dealer.recv_multipart()
    assert reply[2] == (0).to_bytes(8, "big")
    assert sink.stats.bad_requests == 2 and sink.stats.published == 1
    ctx.destroy(0)


def test_a_taken_port_is_a_clear_error(sink: ZmqSink) -> None:
    with pytest.raises(OSError, match="cannot bind ZMQ KV-event endpoint"):
        ZmqSink(sink.endpoint)


def test_tier_cleared_everywhere_expands_to_the_tiers_seen() -> None:
    s = ZmqSink(LOCAL, encoding="array")  # the array form cannot name the tier
    sub = ZmqSubscriber(s.endpoint, worker="w")
    time.sleep(0.3)
    s.publish(stored(1))
    s.publish(EventBatch("w", "e1", 2, (TierCleared("ram"),), 2.0))
    out = drain(sub, 2)
    assert out[-1].events == (TierCleared("ram"),)
    sub.close()
    s.close()
