"""The [events] section's ZMQ keys: parsed strictly, and the sink they build publishes."""

from __future__ import annotations

import time

import msgspec
import pytest
import zmq

from ctxcache.errors import ConfigError
from ctxcache.events import BlockStored, EventBatch
from ctxcache.events.zmq_config import ZmqSettings, build_zmq_sink, parse_zmq


def test_no_endpoint_no_sink_and_stray_keys_are_refused() -> None:
    assert parse_zmq({"redis_stream": "x", "token_ids": True}) is None
    with pytest.raises(ConfigError, match="need events.zmq"):
        parse_zmq({"zmq_replay": "tcp://127.0.0.1:5558"})


def test_defaults_and_every_key() -> None:
    assert parse_zmq({"zmq": "tcp://127.0.0.1:5557"}) == ZmqSettings("tcp://127.0.0.1:5557")
    got = parse_zmq(
        {
            "zmq": "tcp://127.0.0.1:5557",
            "zmq_replay": "tcp://127.0.0.1:5558",
            "zmq_topic": "kv-events",
            "zmq_buffer": 50,
            "zmq_queue": 60,
            "zmq_encoding": "array",
            "zmq_hashes": "bytes",
            "token_ids": True,
        }
    )
    assert got == ZmqSettings(
        "tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558", "kv-events", 50, 60, "array", "bytes", True
    )


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"zmq": "127.0.0.1:5557"}, "must be a ZMQ endpoint"),
        ({"zmq": 5557}, "must be a ZMQ endpoint"),
        ({"zmq": "tcp://127.0.0.1:5557", "zmq_replay": "http://x"}, "zmq_replay must be a ZMQ endpoint"),
        ({"zmq": "tcp://127.0.0.1:5557", "zmq_buffer": 0}, "zmq_buffer must be a positive integer"),
        ({"zmq": "tcp://127.0.0.1:5557", "zmq_queue": "10"}, "zmq_queue must be a positive integer"),
        ({"zmq": "tcp://127.0.0.1:5557", "zmq_buffer": True}, "zmq_buffer must be a positive integer"),
        ({"zmq": "tcp://127.0.0.1:5557", "zmq_encoding": "json"}, "zmq_encoding must be one of map, array"),
        ({"zmq": "tcp://127.0.0.1:5557", "zmq_hashes": "hex"}, "zmq_hashes must be one of int, bytes"),
        ({"zmq": "tcp://127.0.0.1:5557", "zmq_topic": 3}, "zmq_topic must be a string"),
        ({"zmq": "tcp://127.0.0.1:5557", "token_ids": "yes"}, "token_ids must be true or false"),
    ],
)
def test_bad_values_are_clear_config_errors(section: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_zmq(section)


def test_the_built_sink_publishes_and_honours_the_token_opt_in() -> None:
    for opt_in in (False, True):
        settings = parse_zmq({"zmq": "tcp://127.0.0.1:*", "zmq_topic": "kv", "token_ids": opt_in})
        assert settings is not None
        sink = build_zmq_sink(settings)
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv")
        sub.setsockopt(zmq.RCVTIMEO, 5000)
        sub.connect(sink.endpoint)
        time.sleep(0.3)
        sink.publish(EventBatch("w", "e", 1, (BlockStored((b"k" * 16,), "ram", None, 2, 8, (7, 8)),)))
        topic, _, payload = sub.recv_multipart()
        assert topic == b"kv"
        assert msgspec.msgpack.decode(payload)[1][0]["token_ids"] == ([7, 8] if opt_in else [])
        sink.close()
        ctx.destroy(0)


def test_a_taken_port_is_a_config_error() -> None:
    settings = parse_zmq({"zmq": "tcp://127.0.0.1:*"})
    assert settings is not None
    first = build_zmq_sink(settings)
    try:
        with pytest.raises(ConfigError, match="cannot bind"):
            build_zmq_sink(ZmqSettings(first.endpoint))
    finally:
        first.close()
