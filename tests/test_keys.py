from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ctxcache.errors import ConfigError, InvalidTokensError, TokenTypeError
from ctxcache.keys import KEY_BYTES, BlockHasher, Namespace, as_token_array

pytestmark = pytest.mark.usefixtures("key_walk")  # compiled and pure-Python (conftest.py)


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


def test_int32_fast_path_reads_the_sign_of_every_token():
    """Native contiguous int32 arrays skip the numpy reduction: their sign bytes are checked
    instead, so a negative id at any position (and at the int32 minimum) is still refused, and a
    valid array is returned as is (no copy)."""
    for n in (1, 4, 17, 128):
        ok = np.arange(n, dtype=np.int32) * (2**31 // max(n, 2))
        ok[-1] = 2**31 - 1
        assert as_token_array(ok) is ok
        for pos in {0, n // 2, n - 1}:
            for bad in (-1, -(2**31), -256, -(2**24)):
                arr = ok.copy()
                arr[pos] = bad
                with pytest.raises(InvalidTokensError, match=f"non-negative; found {bad}"):
                    as_token_array(arr)
    assert as_token_array(np.empty(0, dtype=np.int32)).tolist() == []
    swapped = np.array([1, 2], dtype=np.int32).byteswap().view(np.dtype(np.int32).newbyteorder())
    assert as_token_array(swapped).tolist() == [1, 2]  # not native: the general path converts it


def test_unsigned_and_boundary_ids():
    assert as_token_array(np.array([0, 2**31 - 1], dtype=np.uint32)).tolist() == [0, 2**31 - 1]
    with pytest.raises(InvalidTokensError, match="int32"):
        as_token_array(np.array([2**31], dtype=np.uint32))


# --- what mutation testing found untested (docs/testing.md) --------------------------------------


def test_keys_are_stable_across_releases():
    """Persistent tiers outlive the process: a restarted or upgraded server must compute the same
    keys for the same tokens, or every block on disk and in Redis becomes unreachable. Changing
    the derivation is a format change: bump FORMAT_VERSION (Namespace.version) instead."""
    ns = Namespace("t", model="m", salt=b"s")
    assert ns.root.hex() == "a696a3efca8e02a48c5fa351fd5c6e13"
    assert [k.hex() for k in BlockHasher(2, "xxh3").keys([1, 2, 3, 4], ns)] == [
        "51d7c6afee7282fd62a4be662f2679d5",
        "d8fc5d14f6598a607580219b8dd06f4b",
    ]
    assert [k.hex() for k in BlockHasher(2, "blake3").keys([1, 2, 3, 4], ns)] == [
        "5ef64482f8255f05127d5e25ef2b1339",
        "98a4eed2cc9b546c2a377119ba14648b",
    ]


@pytest.mark.parametrize("kw", [{"tenant": 1}, {"model": b"m"}, {"tenant": None, "model": 2}])
def test_namespace_names_must_be_str(kw):
    with pytest.raises(TypeError, match="Namespace tenant and model must be str"):
        Namespace(**kw)


@pytest.mark.parametrize("hash_name", ["xxh3", "blake3"])
def test_walk_reuses_known_keys_and_still_verifies(hash_name):
    """A Prompt remembers keys it hashed (the server looks a request up, then pins it): walks over
    a prompt that knows none, some, all or more than the match of its keys agree, and a known
    key's block is verified as a fresh one is."""
    h = BlockHasher(4, hash_name)
    ns = Namespace()
    arr = as_token_array(list(range(24)))
    pairs = list(h.chain(arr, ns))
    assert [d for _, d in pairs] == h.block_bytes(arr) == [arr[i : i + 4].tobytes() for i in range(0, 24, 4)]
    table = {k: _Stored(d) for k, d in pairs[:4]}
    for known in range(7):
        p = h.prompt(arr, ns)
        p.keys(known)
        assert [s.tokens for s in h.walk(p, table.get)] == [d for _, d in pairs[:4]], known
        assert p.keys() == [k for k, _ in pairs]
    table[pairs[2][0]] = _Stored(b"\0" * 16)  # a collision on a known key ends the match there
    for known in (0, 3, 6):
        p = h.prompt(arr, ns)
        p.keys(known)
        assert len(h.walk(p, table.get)) == 2, known


def test_prompt_keys_are_hashed_once_and_shared_with_prefixes(monkeypatch):
    h = BlockHasher(4)
    ns = Namespace()
    p = h.prompt(list(range(20)), ns)
    full = h.keys(list(range(20)), ns)
    assert p.keys(2) == full[:2] and p.keys(99) == full and p.keys(0) == []
    hashed: list[int] = []
    stream, native = h._stream, h._native

    def counting(buf, ns, parent, start, stop):
        hashed.append(stop - start)
        return stream(buf, ns, parent, start, stop)

    def counting_chain(buf, stride, start, stop, *rest):  # Prompt.keys calls the compiled chain itself
        hashed.append(stop - start)
        return native.chain(buf, stride, start, stop, *rest)

    monkeypatch.setattr(h, "_stream", counting)
    if native is not None:
        monkeypatch.setattr(h, "_native", SimpleNamespace(chain=counting_chain, token_bytes=native.token_bytes))
    q = p.prefix(12)
    assert q.keys() == full[:3] and q.keys(1) == full[:1]
    assert p.extend([1, 2, 3, 4]).keys()[:5] == full
    assert hashed == [1], "only the extension's new block is hashed"
    fresh = h.prompt(list(range(20)), ns).prefix(8)  # a prefix that hashes its own blocks
    assert fresh.namespace == ns and fresh.keys() == full[:2]


def test_token_validation_messages_name_the_problem():
    with pytest.raises(TokenTypeError, match="not str"):
        as_token_array("abc")
    with pytest.raises(TokenTypeError, match="not int"):
        as_token_array(42)
    with pytest.raises(InvalidTokensError, match="must be integers: "):
        as_token_array([1, [2, 3]])
    # The first offending id is named, past valid boundary ids.
    with pytest.raises(InvalidTokensError, match=f"got {2**70}$"):
        as_token_array([0, 2**31 - 1, 2**70, None])
    with pytest.raises(InvalidTokensError, match="got True$"):
        as_token_array([True, 2**70])
    # Zero is a valid id: a too-large one next to it is reported as too large.
    with pytest.raises(InvalidTokensError, match=f"fit in int32; found {2**40}"):
        as_token_array([0, 2**40])


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16])
def test_valid_ids_of_every_integer_dtype_pass(dtype):
    arr = np.array([0, 1, 5, 100, 7, 3], dtype=dtype)
    for view in (arr, arr[::2], arr[::-1]):
        out = as_token_array(view)
        assert out.dtype == np.dtype("<i4") and out.tolist() == view.tolist()
    for empty in ([], np.array([], dtype=dtype)):
        assert as_token_array(empty).dtype == np.dtype("<i4")


def test_hasher_defaults_and_smallest_block():
    assert BlockHasher().block_size == 256 and BlockHasher().hash == "xxh3"
    h = BlockHasher(1)
    assert len(h.keys([3, 1, 2], Namespace())) == 3
