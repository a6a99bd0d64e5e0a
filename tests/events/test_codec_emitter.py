"""The stream codec round-trips every event and refuses what it cannot read; the emitter turns
engine records into few events in order and numbers batches from 1 without gaps; a bad [events]
table is a clear ConfigError."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from ctxcache.errors import ConfigError
from ctxcache.events import BlockRemoved, BlockStored, EventBatch, Heartbeat, TierCleared, WorkerStarted
from ctxcache.events.codec import EventDecodeError, decode_events, decode_events_reference, encode_events
from ctxcache.events.emitter import Emitter, coalesce
from ctxcache.events.runtime import EventsConfig
from ctxcache.events.state import WorkerView, decode_snapshot, encode_snapshot
from ctxcache.server.config import load_server_config


def k(i: int) -> bytes:
    return i.to_bytes(16, "big")


EVENTS = (
    WorkerStarted(("memory", "redis"), ("redis",), 32, ("redis://h:1/0#p:",)),
    BlockStored((k(1), k(2)), "memory", None, 32, 2048),
    BlockStored((k(3),), "redis", k(2), 32, 1024, tuple(range(32))),
    BlockRemoved((k(1),), "memory", "demoted"),
    TierCleared("redis", "lost"),
    Heartbeat(),
)


def test_every_event_round_trips_and_garbage_is_refused():
    blob = encode_events(EVENTS)
    assert decode_events(blob) == EVENTS
    for bad in (blob[:-1], b"\x09" + blob[1:], blob + b"x", blob[:5] + b"\x63" + blob[6:]):
        with pytest.raises(EventDecodeError):
            decode_events(bad)


def test_the_unrolled_decoder_agrees_with_the_reference_on_damaged_batches():
    """Cut, overwritten or padded anywhere: both decode the same events or both refuse."""
    blob = encode_events(EVENTS + (BlockRemoved((k(5), k(6)), "redis", "expired"),))
    rnd = random.Random(7)

    def read(decode: Callable[[bytes], object], data: bytes) -> object:
        try:
            return decode(data)
        except EventDecodeError:
            return "refused"

    outcomes = set()
    for _ in range(3000):
        b = bytearray(blob)
        op = rnd.randrange(3)
        if op == 0:
            b = b[: rnd.randrange(len(b))]
        elif op == 1:
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        else:
            b += bytes(rnd.randrange(1, 4))
        fast, ref = read(decode_events, bytes(b)), read(decode_events_reference, bytes(b))
        assert fast == ref, bytes(b).hex()
        outcomes.add(fast == "refused")
    assert outcomes == {True, False}  # both kinds of outcome were exercised


def test_a_snapshot_round_trips():
    view = WorkerView("w", "ep", 9, {"redis": {k(i) for i in range(100)}, "memory": set()}, EVENTS[0])
    back, sid = decode_snapshot("w", encode_snapshot(view, "12-3"))
    assert (back.epoch, back.seq, back.tiers, back.started, sid) == ("ep", 9, view.tiers, EVENTS[0], "12-3")
    assert back.store_of("redis") == "redis://h:1/0#p:" and back.store_of("memory") is None
    with pytest.raises(EventDecodeError):
        decode_snapshot("w", b"nope")


def test_records_coalesce_into_chains_in_order_either_way():
    deepest_first = [("s", "m", k(i), k(i - 1) if i else None, 4, 10, None) for i in (3, 2, 1, 0)]
    in_order = [("s", "r", k(i), k(i - 1) if i else None, 4, 10, None) for i in range(4)]
    gone = [("r", "m", k(i), "evicted") for i in range(3)]
    out = coalesce(deepest_first + in_order + gone + [("r", "m", k(9), "erased")])
    assert out == [
        BlockStored(tuple(k(i) for i in range(4)), "m", None, 4, 40),
        BlockStored(tuple(k(i) for i in range(4)), "r", None, 4, 40),
        BlockRemoved((k(0), k(1), k(2)), "m", "evicted"),
        BlockRemoved((k(9),), "m", "erased"),
    ]


class Keep:
    def __init__(self) -> None:
        self.got: list[EventBatch] = []

    def publish(self, batch: EventBatch) -> None:
        self.got.append(batch)

    def close(self) -> None:
        pass


class Broken(Keep):
    def publish(self, batch: EventBatch) -> None:
        raise RuntimeError("down")


def test_batches_are_numbered_from_one_without_gaps_and_a_broken_sink_hurts_no_other():
    keep = Keep()
    em = Emitter("w", [Broken(), keep], heartbeat_s=0.05)
    for i in range(5):
        em.stored("m", k(i), None, 4, 1, None)
        em.flush()
    assert em.flush() == 0  # nothing recorded: no batch
    assert [b.seq for b in keep.got] == [1, 2, 3, 4, 5] and {b.epoch for b in keep.got} == {em.epoch}
    assert em.sink_errors == 5
    em.start()
    import time

    time.sleep(0.3)
    em.close()
    assert any(isinstance(e, Heartbeat) for b in keep.got for e in b.events)  # a quiet worker heartbeats
    assert [b.seq for b in keep.got] == list(range(1, len(keep.got) + 1))


@pytest.mark.parametrize(
    "table",
    [{"nope": 1}, {"buffer": 0}, {"heartbeat_s": -1}, {"url": "http://x"}, {"worker": "a b"}, {"prefix": "{x}"},
     {"token_ids": "yes"}],
)  # fmt: skip
def test_a_bad_events_table_is_a_config_error(table):
    with pytest.raises(ConfigError):
        EventsConfig.from_dict(table)
    with pytest.raises(ConfigError):
        load_server_config({"events": table})


def test_the_zmq_keys_are_left_to_the_zmq_publisher():
    cfg = EventsConfig.from_dict({"zmq": "tcp://127.0.0.1:5557", "zmq_replay": "tcp://127.0.0.1:5558"})
    assert cfg.zmq == "tcp://127.0.0.1:5557" and cfg.extra == {"zmq_replay": "tcp://127.0.0.1:5558"}
