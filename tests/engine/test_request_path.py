"""One request path: a request's tokens are validated once and each block key hashed once, from
the lookup through the store to a pin, because they all take the request's Prompt."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import ctxcache.keys as keys_mod
from ctxcache import ContextCache, accel
from ctxcache.keys import BlockHasher, Namespace
from ctxcache.server.pins import PinManager

BS = 4


@pytest.fixture(params=["python", "native"])
def counted(request, monkeypatch):
    """Counts token validations and hashed blocks: in the pure-Python walk every key comes out of
    BlockHasher._stream; in the compiled one (ctxcache._native) out of its chain and walk."""
    n = {"validated": 0, "hashed": 0}
    validate, stream = keys_mod.as_token_array, BlockHasher._stream

    def as_token_array(tokens):  # Prompt.extend validates its new tokens here under either walk
        n["validated"] += 1
        return validate(tokens)

    monkeypatch.setattr(keys_mod, "as_token_array", as_token_array)
    if request.param == "native":
        if accel.native is None:
            pytest.skip(f"ctxcache._native: {accel.reason}")
        monkeypatch.setattr(accel, "native", _counting_native(accel.native, n))
        return n
    monkeypatch.setattr(accel, "native", None)

    def _stream(self, *args):
        for key in stream(self, *args):
            n["hashed"] += 1
            yield key

    monkeypatch.setattr(BlockHasher, "_stream", _stream)
    return n


def _counting_native(native, n):
    def token_bytes(tokens):
        n["validated"] += 1
        return native.token_bytes(tokens)

    def chain(*args):
        out = native.chain(*args)
        n["hashed"] += len(out)
        return out

    def walk(buf, stride, blocks, keys, *rest):
        had = len(keys)
        try:
            return native.walk(buf, stride, blocks, keys, *rest)
        finally:
            n["hashed"] += len(keys) - had

    return SimpleNamespace(token_bytes=token_bytes, chain=chain, walk=walk)


def test_lookup_store_and_pin_share_one_validation_and_one_hash_per_block(counted):
    cache = ContextCache.from_config({"block_size": BS, "tiers": [{"kind": "memory", "capacity": 10_000}]})
    pins = PinManager(cache, max_bytes=10_000)
    toks = list(range(10 * BS + 2))
    prompt = cache.prompt(toks, "t")
    with cache.lookup(prompt.prefix(len(toks) - 1)) as m:  # cold: hashes one block
        assert m.n_blocks == 0 and counted["hashed"] == 1
        cache.store(prompt, [b"kv"] * prompt.n_blocks, first_block=0)
    assert pins.keep(prompt.prefix(6 * BS), "t", 300) == 6 * BS
    with cache.lookup(prompt) as m:
        assert m.n_blocks == 10
    assert counted == {"validated": 1, "hashed": 10}
    cache.store(prompt.extend([7] * (2 * BS)), [b"kv"] * 2, first_block=10)  # the reply's 2 blocks
    assert counted == {"validated": 2, "hashed": 12}  # only the new blocks are hashed


def test_prefix_and_extend_keys_equal_a_fresh_hash():
    h = BlockHasher(BS)
    ns = Namespace("t")
    toks = np.arange(9 * BS, dtype=np.int32)
    full = h.prompt(toks, ns)
    full.keys()
    short = full.prefix(5 * BS + 1)
    assert short.keys() == h.keys(toks[: 5 * BS], ns) and short.n_blocks == 5
    other = short.extend([3] * (2 * BS))  # diverges from ``full`` after block 5
    assert other.keys() == h.keys(list(toks[: 5 * BS + 1]) + [3] * (2 * BS), ns)
    assert full.keys() == h.keys(toks, ns)  # the shared list was not corrupted by the extension
