"""vLLM's own KV-event classes and publisher against ctxcache's ZMQ events (`make test-vllm`).

- vLLM's decoder (``msgspec.msgpack.Decoder(KVEventBatch)``) reads what ctxcache's sink sends on
  127.0.0.1, live and through the replay endpoint;
- ctxcache's subscriber follows vLLM's ``ZmqEventPublisher`` in both encodings vLLM has used,
  and recovers a missed range from vLLM's own replay ROUTER.

In the main virtualenv (no vLLM) the module is skipped; tests/events covers the same paths with
a decoder written from vLLM's schema and fixtures made by vLLM's classes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm: run `make test-vllm`")

import msgspec  # noqa: E402
import zmq  # noqa: E402
from vllm.distributed.kv_events import (  # noqa: E402
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    ZmqEventPublisher,
)

from ctxcache.events import BlockRemoved as CBlockRemoved  # noqa: E402
from ctxcache.events import BlockStored as CBlockStored  # noqa: E402
from ctxcache.events import EventBatch, TierCleared, WorkerStarted  # noqa: E402
from ctxcache.events.zmq import ZmqSink  # noqa: E402
from ctxcache.events.zmq_sub import ZmqSubscriber  # noqa: E402


def key(i: int) -> bytes:
    return (i * 0x0101010101010101).to_bytes(16, "big")


def test_vllms_decoder_reads_ctxcache_events_over_tcp() -> None:
    sink = ZmqSink("tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*", topic="kv-events", token_ids=True)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv-events")
    sub.setsockopt(zmq.RCVTIMEO, 5000)
    sub.connect(sink.endpoint)
    time.sleep(0.3)
    sink.publish(EventBatch("w", "e", 1, (WorkerStarted(("ram", "redis")),), 1.0))
    sink.publish(
        EventBatch("w", "e", 2, (CBlockStored((key(1), key(2)), "ram", key(9), 4, 256, tuple(range(8))),), 2.0)
    )
    sink.publish(
        EventBatch("w", "e", 3, (CBlockRemoved((key(1),), "ram", "demoted"), TierCleared("redis", "lost")), 3.0)
    )
    decoder = msgspec.msgpack.Decoder(KVEventBatch)
    batches = [decoder.decode(sub.recv_multipart()[2]) for _ in range(3)]
    assert [b.ts for b in batches] == [1.0, 2.0, 3.0] and {b.data_parallel_rank for b in batches} == {0}
    assert isinstance(batches[0].events[0], AllBlocksCleared)
    stored = batches[1].events[0]
    assert isinstance(stored, BlockStored)
    # vLLM's ints are its digests' low 64 bits; ctxcache's are its keys' (the same fold).
    assert stored.block_hashes == [int.from_bytes(key(1)[8:], "big"), int.from_bytes(key(2)[8:], "big")]
    assert stored.parent_block_hash == int.from_bytes(key(9)[8:], "big")
    assert (stored.medium, stored.block_size, stored.token_ids) == ("ram", 4, list(range(8)))
    removed, cleared = batches[2].events
    assert isinstance(removed, BlockRemoved) and removed.medium == "ram"
    assert isinstance(cleared, AllBlocksCleared)
    # vLLM's replay protocol against ctxcache's ROUTER: start sequence in, (topic, seq, payload)s out.
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVTIMEO, 5000)
    dealer.connect(sink.replay_endpoint or "")
    dealer.send_multipart((b"", (1).to_bytes(8, "big")))
    replies = []
    while (frames := dealer.recv_multipart())[2] != ZmqEventPublisher.END_SEQ:
        replies.append((int.from_bytes(frames[2], "big"), decoder.decode(frames[3]).ts))
    assert replies == [(1, 2.0), (2, 3.0)]
    sink.close()
    ctx.destroy(0)


class ArrayStored(BlockStored, array_like=True, tag="BlockStored"):
    pass


class ArrayRemoved(BlockRemoved, array_like=True, tag="BlockRemoved"):
    pass


class ArrayCleared(AllBlocksCleared, array_like=True, tag="AllBlocksCleared"):
    pass


FORMS = {"map": (BlockStored, BlockRemoved, AllBlocksCleared), "array": (ArrayStored, ArrayRemoved, ArrayCleared)}


@pytest.fixture
def vllm_pub(tmp_path: Path) -> Iterator[ZmqEventPublisher]:
    # vLLM binds wildcard, ipc and inproc endpoints and connects to others: ipc keeps the PUB
    # local (no wildcard bind); the replay ROUTER is always bound, here on 127.0.0.1.
    with zmq.Context() as probe, probe.socket(zmq.REP) as s:
        port = s.bind_to_random_port("tcp://127.0.0.1")
    pub = ZmqEventPublisher(
        0, endpoint=f"ipc://{tmp_path}/kv", replay_endpoint=f"tcp://127.0.0.1:{port}", topic="kv-events"
    )
    yield pub
    pub.shutdown()


@pytest.mark.parametrize("form", ["map", "array"])
def test_ctxcache_follows_vllms_publisher_and_replays_from_it(vllm_pub: ZmqEventPublisher, form: str) -> None:
    stored_cls, removed_cls, cleared_cls = FORMS[form]
    config = vllm_pub.get_publisher_config()
    sub = ZmqSubscriber(config.endpoint, replay_endpoint=config.replay_endpoint, topic="kv-events", worker="vllm-0")
    time.sleep(0.3)
    for i in range(1, 9):
        ev = stored_cls(
            block_hashes=[i],
            parent_block_hash=i - 1 or None,
            token_ids=[i] * 4,
            block_size=4,
            lora_id=None,
            medium="GPU",
            lora_name=None,
        )
        vllm_pub.publish(KVEventBatch(ts=float(i), events=[ev]))
    vllm_pub.publish(KVEventBatch(ts=9.0, events=[removed_cls(block_hashes=[3], medium="GPU"), cleared_cls()]))
    out: list[EventBatch] = []
    end = time.monotonic() + 10
    while not out and time.monotonic() < end:
        out += sub.poll(0.2)
    for _ in range(4):  # the consumer misses vLLM's sequences 1..4
        assert sub._sub.poll(5000)
        sub._sub.recv_multipart()
    while len(out) < 10 and time.monotonic() < end:
        out += sub.poll(0.2)
    assert len({b.epoch for b in out}) == 1 and [b.seq for b in out] == list(range(1, 11))
    stores = [ev for b in out for ev in b.events if isinstance(ev, CBlockStored)]
    assert [ev.keys for ev in stores] == [(i.to_bytes(8, "big"),) for i in range(1, 9)]
    assert all(ev.tier == "GPU" and ev.token_ids is None for ev in stores)  # tokens not kept unless asked
    assert out[-1].events == (CBlockRemoved(((3).to_bytes(8, "big"),), "GPU"), TierCleared("GPU"))
    assert (sub.stats.gaps, sub.stats.replayed, sub.stats.unrecovered, sub.stats.garbled) == (1, 4, 0, 0)
    sub.close()
