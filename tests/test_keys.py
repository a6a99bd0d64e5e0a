from __future__ import annotations

import numpy as np
import pytest

from ctxcache.errors import ConfigError, InvalidTokensError, TokenTypeError
from ctxcache.keys import KEY_BYTES, BlockHasher, Namespace, as_token_array


def test_chain_depends_on_every_earlier_token():
    h = BlockHasher(4)
    ns = Namespace("t")
    a = h.keys(list(range(12)), ns)
    b = h.keys([99] + list(range(1, 12)), ns)  # differs only in token 0
    assert len(a) == 3 and all(len(k) == KEY_BYTES for k in a)
    assert all(x != y for x, y in zip(a, b))
    c = h.keys(list(range(8)) + [7, 7, 7, 7], ns)  # differs only in block 2
    assert a[:2] == c[:2] and a[2] != c[2]


def test_trailing_partial_block_is_not_keyed():
    h = BlockHasher(4)
    ns = Namespace()
    assert h.keys(list(range(11)), ns) == h.keys(list(range(8)), ns)
    assert h.keys([1, 2, 3], ns) == []


def test_list_and_numpy_inputs_give_same_keys():
    h = BlockHasher(16)
    ns = Namespace()
    toks = list(range(100, 164))
    assert h.keys(toks, ns) == h.keys(np.array(toks, dtype=np.int64), ns) == h.keys(np.array(toks, np.int32), ns)


@pytest.mark.parametrize(
    "other",
    [Namespace("b"), Namespace("a", model="m2"), Namespace("a", salt=b"s"), Namespace("a", version=2)],
)
def test_namespaces_share_no_key(other):
    h = BlockHasher(4)
    toks = list(range(16))
    assert set(h.keys(toks, Namespace("a"))).isdisjoint(h.keys(toks, other))


def test_namespace_fields_are_length_prefixed():
    assert Namespace("ab", model="c").root != Namespace("a", model="bc").root
    assert Namespace("x").root == Namespace("x").root  # deterministic across instances


def test_blake3_differs_from_xxh3_and_is_deterministic():
    toks = list(range(32))
    ns = Namespace()
    k1 = BlockHasher(8, "blake3").keys(toks, ns)
    assert k1 == BlockHasher(8, "blake3").keys(toks, ns)
    assert k1 != BlockHasher(8, "xxh3").keys(toks, ns)


def test_iter_keys_is_lazy_and_start_skips():
    h = BlockHasher(4)
    ns = Namespace()
    arr = as_token_array(list(range(16)))
    blocks = h.block_bytes(arr)
    full = h.keys(arr, ns)
    assert list(h.iter_keys(blocks, ns, start=2)) == full[2:]
    assert next(h.iter_keys(blocks, ns)) == full[0]


@pytest.mark.parametrize(
    ("tokens", "match"),
    [
        ([1, -2, 3], "non-negative"),
        ([1, 2.5], "integers"),
        (["a", "b"], "integers"),
        ([1, 2**40], "int32"),
        ([1, 2**70], "int32"),
        (np.array([[1, 2]]), "one-dimensional"),
        (np.array([1.0, 2.0]), "integers"),
        (np.array([True, False]), "integers"),
        (np.array([-1], dtype=np.int32), "non-negative"),
    ],
)
def test_bad_tokens_get_a_clear_value_error(tokens, match):
    with pytest.raises(InvalidTokensError, match=match):
        as_token_array(tokens)


@pytest.mark.parametrize("tokens", ["abc", b"abc", 42, None, {1, 2}])
def test_non_sequences_get_a_type_error(tokens):
    with pytest.raises(TokenTypeError):
        as_token_array(tokens)


def test_empty_tokens_are_fine():
    assert as_token_array([]).size == 0
    assert BlockHasher(4).keys([], Namespace()) == []


def test_hasher_validates_its_config():
    with pytest.raises(ConfigError, match="block_size"):
        BlockHasher(0)
    with pytest.raises(ConfigError, match="known: xxh3, blake3"):
        BlockHasher(4, "md5")


class _Stored:
    def __init__(self, tokens: bytes) -> None:
        self.tokens = tokens


@pytest.mark.parametrize("hash_name", ["xxh3", "blake3"])
def test_walk_matches_chain_and_verifies_tokens(hash_name):
    h = BlockHasher(4, hash_name)
    ns = Namespace()
    arr = as_token_array(list(range(20)))
    pairs = list(h.chain(arr, ns))
    assert [k for k, _ in pairs] == h.keys(arr, ns)
    table = {k: _Stored(d) for k, d in pairs[:3]}
    assert [s.tokens for s in h.walk(h.prompt(arr, ns), table.get)] == [d for _, d in pairs[:3]]
    # A stored block whose tokens differ (a collision) ends the match there.
    table[pairs[1][0]] = _Stored(b"\0" * 16)
    assert len(h.walk(h.prompt(arr, ns), table.get)) == 1
    assert h.walk(h.prompt([], ns), table.get) == []


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_negative_ids_rejected_for_every_signed_dtype(dtype):
    with pytest.raises(InvalidTokensError, match="non-negative"):
        as_token_array(np.array([3, -1], dtype=dtype))
    with pytest.raises(InvalidTokensError, match="non-negative"):
        as_token_array(np.array([3, 0, -1, 0], dtype=dtype)[::2][::-1])  # non-contiguous view


def test_unsigned_and_boundary_ids():
    assert as_token_array(np.array([0, 2**31 - 1], dtype=np.uint32)).tolist() == [0, 2**31 - 1]
    with pytest.raises(InvalidTokensError, match="int32"):
        as_token_array(np.array([2**31], dtype=np.uint32))
