"""Encryption at rest (AES-GCM per tenant) and the tenant in block headers (format version 2)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import xxhash

from ctxcache.codec import _FIXED, _SUM_AT, Codec, read_header
from ctxcache.engine.sealing import TenantSealer
from ctxcache.engine.tenancy import load_tenancy
from ctxcache.errors import ConfigError, CorruptBlockError

from .tenancy_util import BS, ask, cache_with, prompt_of, tier_of

MASTER = "ab" * 32
KEY, TOK = b"k" * 16, np.arange(BS, dtype="<i4").tobytes()
PAYLOAD = [np.full(16, 1234.5, np.float32)]


def rechecksum(blob: bytearray) -> bytearray:
    """What an attacker with write access to the store can do: fix up the (unkeyed) checksums."""
    hlen = _FIXED.unpack_from(blob)[11]
    struct.pack_into("<Q", blob, _FIXED.size - 16, xxhash.xxh3_64_intdigest(bytes(blob[hlen:])))
    struct.pack_into("<Q", blob, _SUM_AT, 0)
    struct.pack_into("<Q", blob, _SUM_AT, xxhash.xxh3_64_intdigest(bytes(blob[:hlen])))
    return blob


def sealed_codec() -> Codec:
    c = Codec()
    c.sealer = TenantSealer(bytes.fromhex(MASTER))
    return c


def test_headers_carry_the_tenant_and_old_blocks_still_read():
    blob = Codec().encode(PAYLOAD, KEY, TOK, b"p" * 16, 3, b"team-a")
    h = read_header(blob)
    assert h.tenant == b"team-a" and not h.sealed and Codec().decode(blob).tenant == b"team-a"
    old = bytearray(Codec().encode(PAYLOAD, KEY, TOK, b"p" * 16, 3))
    struct.pack_into("<H", old, 4, 1)  # a version-1 block: no tenant field (its byte was padding)
    assert Codec().decode(bytes(rechecksum(old))).tenant == b""
    future = bytearray(old)
    struct.pack_into("<H", future, 4, 9)
    with pytest.raises(CorruptBlockError, match="version 9"):
        Codec().decode(bytes(rechecksum(future)))


def test_a_sealed_block_opens_only_for_its_tenant_and_identity():
    c = sealed_codec()
    blob = c.encode(PAYLOAD, KEY, TOK, b"p" * 16, 3, b"aa")
    assert np.float32(1234.5).tobytes() not in blob  # no plaintext at rest
    assert read_header(blob).sealed and float(c.decode(blob).payload[0][0]) == 1234.5
    moved = bytearray(blob)
    at = _FIXED.size + 32  # the tenant id, after key and parent
    moved[at : at + 2] = b"bb"  # copied into tenant bb's namespace, checksums fixed up
    with pytest.raises(CorruptBlockError, match="authentication"):
        c.decode(bytes(rechecksum(moved)))
    edited = bytearray(blob)
    edited[-1] ^= 1  # a payload byte edited in storage
    with pytest.raises(CorruptBlockError, match="authentication"):
        c.decode(bytes(rechecksum(edited)))
    with pytest.raises(CorruptBlockError, match="no key"):
        Codec().decode(blob)  # a reader without the key: a miss, never garbage


def test_encryption_at_rest_on_disk_and_redis(tmp_path, redis_server):
    ram, disk = tier_of("memory", tmp_path, capacity=1 << 20), tier_of("disk", tmp_path)
    red = tier_of("redis", tmp_path, redis_server.url)
    tenancy = {"encrypt": True}
    cache = cache_with([ram, disk, red], {"a": {}, "b": {}}, **tenancy, env_key=MASTER)
    p = prompt_of(1)
    ask(cache, "a", p)
    with cache._engine.lock:
        cache._engine.placement.make_room(0, cache.slots[0].used())
    cache.flush()
    with cache._engine.lock:
        cache._engine.placement.make_room(1, cache.slots[1].used() // 2)
    cache.flush()
    files = list((disk.root / "blocks").rglob("*.blk"))
    stored = [f.read_bytes() for f in files] + list(
        redis_server.client().mget(redis_server.client().keys(red.prefix + b"*"))
    )
    # write-through (the defaults): all 4 blocks in Redis, and the 2 the second pass left on disk
    assert len(stored) == 6 and all(read_header(b).sealed and read_header(b).tenant == b"a" for b in stored)
    assert all(np.float32(p[0]).tobytes() not in b for b in stored)
    assert ask(cache, "a", p) == len(p)  # opened from disk and Redis
    assert ask(cache, "b", p) == 0
    cache.close()


def test_encryption_needs_a_master_key():
    with pytest.raises(ConfigError, match="master key"):
        load_tenancy({"a": {}}, {"encrypt": True}, env={})
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        load_tenancy({"a": {}}, {"encrypt": True}, env={"CTXCACHE_MASTER_KEY": "abcd"})
