"""The `[events]` table's zmq keys reach a real ZmqSink: a store on a real ContextCache (memory
over a real redis-server) is read by ctxcache's ZMQ subscriber with the worker's own keys; the
zmq_* keys are checked when the table is parsed."""

from __future__ import annotations

import time

import pytest

from ctxcache.cache import ContextCache
from ctxcache.errors import ConfigError
from ctxcache.events import BlockStored
from ctxcache.events.runtime import EventsConfig, start_events
from ctxcache.events.zmq import ZmqSink
from ctxcache.events.zmq_sub import ZmqSubscriber

BS = 4


def test_a_store_reaches_a_zmq_subscriber_through_the_events_config(redis_url):
    tiers = [
        {"kind": "memory", "capacity": "1MiB"},
        {"kind": "redis", "capacity": "8MiB", "url": redis_url, "prefix": "zw:"},
    ]
    cache = ContextCache.from_config({"block_size": BS, "tiers": tiers})
    rt = start_events(
        cache,
        {"worker": "zw", "consume": False, "prefix": "zw:ev:", "zmq": "tcp://127.0.0.1:*", "zmq_hashes": "bytes",
         "zmq_replay": "tcp://127.0.0.1:*", "zmq_topic": "kv"},
    )  # fmt: skip
    try:
        sink = next(s for s in rt.emitter.sinks if isinstance(s, ZmqSink))
        sub = ZmqSubscriber(sink.endpoint, replay_endpoint=sink.replay_endpoint, topic="kv", worker="zw")
        time.sleep(0.3)  # PUB/SUB: the subscription reaches the publisher a moment after connect
        toks = list(range(500, 520))
        cache.store(toks, [bytes([i]) * 32 for i in range(5)])
        cache.flush()
        keys = set(cache.hasher.keys(toks, cache.namespace()))
        got: set[bytes] = set()
        end = time.monotonic() + 10
        while not keys <= got and time.monotonic() < end:
            got |= {k for b in sub.poll(0.2) for e in b.events if isinstance(e, BlockStored) for k in e.keys}
        assert keys <= got
        sub.close()
    finally:
        rt.close()
        cache.close()


@pytest.mark.parametrize(
    "table",
    [{"zmq": "tcp://127.0.0.1:1", "zmq_encoding": "json"}, {"zmq_topic": "kv"}, {"zmq": "http://x"}, {"zmq_bogus": 1}],
)
def test_bad_zmq_keys_are_refused_when_the_table_is_parsed(table):
    with pytest.raises(ConfigError):
        EventsConfig.from_dict(table)
