"""One request path: a request's tokens are validated once and each block key hashed once, from
the lookup through the store to a pin, because they all take the request's Prompt."""

from __future__ import annotations

import numpy as np
import pytest

import ctxcache.keys as keys_mod
from ctxcache import ContextCache
from ctxcache.keys import BlockHasher, Namespace
from ctxcache.server.pins import PinManager

BS = 4


@pytest.fixture
def counted(monkeypatch):
    """Counts token validations and hashed blocks (every key comes out of BlockHasher._stream)."""
    n = {"validated": 0, "hashed": 0}
    validate, stream = keys_mod.as_token_array, BlockHasher._stream

    def as_token_array(tokens):
        n["validated"] += 1
        return validate(tokens)

    def _stream(self, *args):
        for key in stream(self, *args):
            n["hashed"] += 1
            yield key

    monkeypatch.setattr(keys_mod, "as_token_array", as_token_array)
    monkeypatch.setattr(BlockHasher, "_stream", _stream)
    return n


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
