"""RedisTier.stored_keys_of, the search verified erasure relies on: SCAN the prefix, read each
value's header (never its payload) and keep the keys whose header names the tenant. These are the
paths docs/testing.md left as follow-ups: headers longer than the first range read (blocks with
many tokens), more keys than one header pipeline, and values under the prefix that are not intact
blocks (skipped, never an error that makes the whole search "unreachable")."""

from __future__ import annotations

import numpy as np

from ctxcache.codec import read_header
from ctxcache.tiers import RedisTier
from ctxcache.tiers.redis import HEAD_GUESS, SCAN_BATCH

SHORT = np.arange(4, dtype="<i4").tobytes()
LONG = np.arange(2 * HEAD_GUESS, dtype="<i4").tobytes()  # a header twice past the first range read


def key(i: int) -> bytes:
    return i.to_bytes(4, "big") * 4


def tier(url: str, prefix: str) -> RedisTier:
    t = RedisTier(1 << 30, url=url, prefix=prefix, retry_interval=0.05)
    assert t.wait_ready()
    return t


def store(t: RedisTier, keys: list[bytes], tenant: bytes, tokens: bytes) -> None:
    blobs = [(k, t.codec.encode([np.full(4, i, np.float32)], k, tokens, tenant=tenant)) for i, k in enumerate(keys)]
    assert t.put_blobs(blobs) == [True] * len(keys)


def test_headers_longer_than_the_first_read_are_read_whole(redis_url, redis_server):
    t = tier(redis_url, "long:")
    a_long, a_short, b_long = [key(i) for i in range(3)], [key(i) for i in range(3, 5)], [key(9)]
    store(t, a_long, b"a", LONG)
    store(t, a_short, b"a", SHORT)
    store(t, b_long, b"b", LONG)
    head = redis_server.client().getrange(b"long:" + a_long[0], 0, HEAD_GUESS - 1)
    assert len(head) == HEAD_GUESS and read_header(redis_server.client().get(b"long:" + a_long[0])).tokens == LONG
    assert sorted(t.stored_keys_of(b"a")) == sorted(a_long + a_short)
    assert t.stored_keys_of(b"b") == b_long
    assert sorted(t.stored_keys_of(None)) == sorted(a_long + a_short + b_long)
    assert t.healthy
    t.close()


def test_more_keys_than_one_header_pipeline(redis_url):
    t = tier(redis_url, "many:")
    a = [key(i) for i in range(SCAN_BATCH + 40)]
    b = [key(i) for i in range(SCAN_BATCH + 40, SCAN_BATCH + 60)]
    store(t, a, b"a", SHORT)
    store(t, b, b"b", SHORT)
    found = t.stored_keys_of(b"a")
    assert found is not None and len(found) == len(a) and set(found) == set(a)
    assert sorted(t.stored_keys_of(b"b")) == sorted(b)
    t.close()


def test_values_that_are_not_intact_blocks_are_skipped(redis_url, redis_server):
    t = tier(redis_url, "odd:")
    good = [key(1), key(2)]
    store(t, good, b"a", LONG)
    raw = redis_server.client()
    raw.hset(b"odd:" + key(3), "field", "value")  # another type under the prefix: GETRANGE errors
    raw.rpush(b"odd:" + key(4), "item")
    raw.set(b"odd:" + key(5), b"")
    raw.set(b"odd:" + key(6), b"not a block at all")
    broken = bytearray(raw.get(b"odd:" + good[0]))
    broken[40] ^= 0xFF  # a damaged long header
    raw.set(b"odd:" + key(7), bytes(broken))
    raw.set(b"odd:" + key(8), raw.get(b"odd:" + good[1]))  # an intact block filed under another name
    assert sorted(t.stored_keys_of(b"a")) == sorted(good)
    assert sorted(t.stored_keys_of(None)) == sorted(good)
    assert t.healthy and t.errors == 0
    t.close()


def test_a_prefix_with_glob_characters_matches_only_itself(redis_url):
    # Unescaped, "g*" would be the pattern "g**", which matches every key of the prefix "gx".
    star, plain = tier(redis_url, "g*"), tier(redis_url, "gx")
    store(star, [key(1)], b"a", SHORT)
    store(plain, [key(2)], b"a", SHORT)
    assert star.stored_keys_of(b"a") == [key(1)]
    assert plain.stored_keys_of(b"a") == [key(2)]
    star.close()
    plain.close()
