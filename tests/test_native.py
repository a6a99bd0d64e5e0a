"""The compiled key walk (ctxcache._native) against the pure-Python reference in keys.py.

Every function of the module must give exactly what keys.py computes: the same keys (a key that
differs strands every block in a persistent tier), the same validated token bytes (or None where
keys.py must decide and name the error), the same walk. Skipped where the module is not built; the
fallback's own selection is tested either way.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcache import accel
from ctxcache.keys import HASHES, BlockHasher, Namespace, as_token_array

native = pytest.importorskip("ctxcache._native", reason="ctxcache._native is not built (tools/build_native.py)")
SRC = Path(__file__).resolve().parents[1] / "src"
EDGE_IDS = [0, 1, 127, 128, 255, 256, 2**15, 2**16 - 1, 2**24, 2**31 - 2, 2**31 - 1]


def hashers(block_size: int, hash_name: str) -> tuple[BlockHasher, BlockHasher]:
    """The same hasher twice: compiled, then pure Python."""
    fast = BlockHasher(block_size, hash_name)
    slow = BlockHasher(block_size, hash_name)
    fast._native, slow._native = native, None  # built but switched off (CTXCACHE_NO_NATIVE): tested all the same
    return fast, slow


def namespaces(rng: np.random.Generator) -> list[Namespace]:
    salt = bytes(rng.integers(0, 256, size=int(rng.integers(0, 40)), dtype=np.uint8))
    return [Namespace(), Namespace("t", model="m", salt=b"s"), Namespace(f"t{rng.integers(1e9)}", salt=salt)]


@pytest.mark.parametrize("hash_name", HASHES)
@pytest.mark.parametrize("block_size", [1, 2, 3, 16, 255, 256, 257, 1024])
def test_chain_gives_the_python_keys(hash_name, block_size):
    rng = np.random.default_rng(block_size)
    fast, slow = hashers(block_size, hash_name)
    for ns in namespaces(rng):
        for n_tokens in (0, block_size - 1, block_size, 3 * block_size + 1, 17 * block_size):
            toks = rng.integers(0, 2**31, size=n_tokens, dtype=np.int64)
            toks[: len(EDGE_IDS)] = EDGE_IDS[: len(toks)]
            buf = as_token_array(toks).tobytes()
            n = len(toks) // block_size
            want = list(slow._stream(buf, ns, ns.root, 0, n))
            assert list(fast._stream(buf, ns, ns.root, 0, n)) == want
            assert fast.keys(toks, ns) == slow.keys(toks, ns) == want
            for start in {0, n // 2, n}:  # chained on a key in the middle, as Prompt.keys does
                parent = want[start - 1] if start else ns.root
                assert (
                    native.chain(buf, block_size * 4, start, n, parent, ns.secret, HASHES.index(hash_name))
                    == (want[start:])
                )


def test_chain_refuses_bad_arguments():
    ns, buf = Namespace(), bytes(64)
    with pytest.raises(ValueError, match="outside"):
        native.chain(buf, 16, 0, 5, ns.root, ns.secret, 0)
    with pytest.raises(ValueError, match="16 bytes"):
        native.chain(buf, 16, 0, 1, b"short", ns.secret, 0)
    with pytest.raises(ValueError, match="32 bytes"):
        native.chain(buf, 16, 0, 1, ns.root, b"x", 0)
    with pytest.raises(ValueError, match="kind"):
        native.chain(buf, 16, 0, 1, ns.root, ns.secret, 7)
    with pytest.raises(ValueError, match="multiple of 4"):
        native.chain(buf, 6, 0, 1, ns.root, ns.secret, 0)
    # The arguments are read without PyArg_ParseTuple: its errors kept, any bytes-like buffer taken.
    assert native.chain(bytearray(buf), 16, 0, 1, memoryview(ns.root), bytearray(ns.secret), 0) == (
        native.chain(buf, 16, 0, 1, ns.root, ns.secret, 0)
    )
    bad_args = [
        ((buf, 16, 0, 1, ns.root, ns.secret), TypeError), (("x" * 64, 16, 0, 1, ns.root, ns.secret, 0), TypeError),
        ((buf, 16.0, 0, 1, ns.root, ns.secret, 0), TypeError), ((buf, 16, 0, 1, ns.root, None, 0), TypeError),
        ((buf, 16, 0, 1, ns.root, ns.secret, 2**40), OverflowError), ((buf, 2**70, 0, 1, ns.root, ns.secret, 0), OverflowError),
    ]  # fmt: skip
    for args, err in bad_args:
        with pytest.raises(err):
            native.chain(*args)
    shards = [{}] * 256
    with pytest.raises(TypeError, match="list"):
        native.walk(buf, 16, 1, (), ns.root, ns.secret, 0, shards, None)
    with pytest.raises(TypeError):
        native.walk(buf, 16, 1, [], ns.root, "s" * 32, 0, shards, None)
    with pytest.raises(TypeError, match="9 arguments"):
        native.walk(buf, 16, 1, [], ns.root, ns.secret, 0, shards)
    assert native.walk(bytearray(buf), 16, 1, [], bytearray(ns.root), memoryview(ns.secret), 0, shards, None) == []


SWAPPED = ">" if sys.byteorder == "little" else "<"
TOKEN_CASES = [
    [], [0], [1, 2, 3], EDGE_IDS, tuple(EDGE_IDS), [2**31], [-1], [1, -5, 3], [True, 2], [True, False], [1, 2.0],
    [1, np.int64(2)], [1, 2**70], ["a"], [None], [[1, 2]],
    *(np.array(EDGE_IDS[:6], dtype=d) for d in ("i2", "u2", "i4", "u4", "i8", "u8", f"{SWAPPED}i4", f"{SWAPPED}u8")),
    np.array(EDGE_IDS, dtype=np.int64), np.array(EDGE_IDS, dtype=np.uint32), np.array([0, 200], dtype=np.uint8),
    np.array([1, -1], dtype=np.int32), np.array([1, -1], dtype=np.int64), np.array([2**31], dtype=np.int64),
    np.array([2**31], dtype=np.uint32), np.array([2**63], dtype=np.uint64), np.array([1.0, 2.0]),
    np.array([True, False]), np.array([[1, 2]], dtype=np.int32), np.arange(10, dtype=np.int32)[::2],
    np.empty(0, dtype=np.int32), np.empty((0, 3), dtype=np.int32), np.array(5, dtype=np.int32),
]  # fmt: skip


@pytest.mark.parametrize("tokens", TOKEN_CASES, ids=repr)
def test_token_bytes_is_as_token_array_or_none(tokens):
    try:
        want = as_token_array(tokens).tobytes()
    except (TypeError, ValueError):  # InvalidTokensError / TokenTypeError: the Python path names it
        want = None
    got = native.token_bytes(tokens)
    assert got is None or got == want
    fast, slow = hashers(4, "xxh3")
    ns = Namespace()
    if want is None:
        with pytest.raises((TypeError, ValueError)) as err:
            fast.prompt(tokens, ns)
        with pytest.raises(err.type, match=re.escape(str(err.value))):
            slow.prompt(tokens, ns)
        return
    p, q = fast.prompt(tokens, ns), slow.prompt(tokens, ns)
    assert p.buf == q.buf and p.tokens.tolist() == q.tokens.tolist() and p.keys() == q.keys()


def test_plain_ids_take_the_compiled_path():
    # The common inputs must not fall back to numpy conversion: None here would be a silent slowdown.
    for tokens in ([5, 6], (5, 6), np.array([5, 6], dtype=np.int32), np.array([5, 6]), np.array([5, 6], dtype="u2")):
        assert native.token_bytes(tokens) == b"\5\0\0\0\6\0\0\0"
    arr = np.arange(8, dtype=np.int32)
    fast, _ = hashers(4, "xxh3")
    assert fast.prompt(arr, Namespace()).tokens is arr  # the caller's array, not a copy


class _Id(int):
    pass


DTYPES = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"]
BAD_IDS = [-1, -(2**31), 2**31, 2**32, 2**32 + 5, 2**63 - 1, -(2**63)]  # 2**32 + 5: the truncated int32 is 5


@pytest.mark.parametrize("dtype", DTYPES)
def test_token_bytes_of_arrays_checks_every_position(dtype):
    # The conversion runs in vector chunks with a scalar tail: an id out of range is caught anywhere.
    info = np.iinfo(dtype)
    for n in (1, 3, 7, 8, 15, 16, 17, 33, 100):
        arr = (np.arange(n) % min(info.max, 2**31 - 1) + 1).astype(dtype)
        assert native.token_bytes(arr) == as_token_array(arr).tobytes()
        for pos in {0, n // 2, n - 1}:
            for bad in BAD_IDS:
                if not info.min <= bad <= info.max:
                    continue
                b = arr.copy()
                b[pos] = bad
                assert native.token_bytes(b) is None, (n, pos, bad)
        hi = arr.copy()
        hi[-1] = min(info.max, 2**31 - 1)  # the largest id each type can give is kept
        assert native.token_bytes(hi) == as_token_array(hi).tobytes()


LIST_CASES = [
    [2**30 - 1, 2**30, 2**31 - 1, 0, 1],  # one digit, two digits, the largest id, zero
    [0] * 5, [2**31 - 1] * 3, [5, _Id(6)], [5, np.int32(6)], [5, np.uint8(6)], [5, np.bool_(True)],
    [1, 2**62], [1, -(2**30)], [1, -1], [2**31 + 1], [1, 2**31 + 2**30], [1, 2**64 + 1], [1, -(2**64)],
]  # fmt: skip


@pytest.mark.parametrize("head", LIST_CASES, ids=repr)
@pytest.mark.parametrize("at", ["start", "middle", "end"])
def test_token_bytes_of_lists_is_as_token_array_or_none(head, at):
    # Beyond the one-digit loop's first stop: the same item at the start, after and inside a run of ids.
    run = list(range(100, 140))
    tokens = {"start": head + run, "middle": run[:20] + head + run[20:], "end": run + head}[at]
    try:
        want = as_token_array(tokens).tobytes()
    except (TypeError, ValueError):
        want = None
    got = native.token_bytes(tokens)
    assert got is None or got == want
    if all(type(t) is int for t in tokens) and want is not None:
        assert got == want  # plain ints in range take the compiled path
    if want is None:
        fast, slow = hashers(4, "xxh3")
        with pytest.raises((TypeError, ValueError)) as err:
            fast.prompt(tokens, Namespace())
        with pytest.raises(err.type, match=re.escape(str(err.value))):
            slow.prompt(tokens, Namespace())


class _Stored:
    def __init__(self, tokens: object) -> None:
        self.tokens = tokens


def _table(pairs, rng):
    """Stored blocks for a chain, some wrong: other tokens (a collision), shorter, or not bytes."""
    table = {}
    for k, d in pairs:
        r = rng.random()
        wrong = [(0.05, b"\1" + d[1:]), (0.08, d[:-4]), (0.12, memoryview(d)), (0.15, bytearray(d)), (1.0, d)]
        table[k] = _Stored(next(v for p, v in wrong if r < p))
        if r > 0.97:
            del table[k]
    return table


@pytest.mark.parametrize("hash_name", HASHES)
def test_walk_gives_the_python_match(hash_name):
    rng = np.random.default_rng(7)
    for _ in range(60):
        bs = int(rng.choice([1, 4, 16, 64]))
        fast, slow = hashers(bs, hash_name)
        ns = namespaces(rng)[int(rng.integers(3))]
        toks = rng.integers(0, 2**31, size=int(rng.integers(0, 40 * bs)), dtype=np.int64)
        pairs = list(slow.chain(as_token_array(toks), ns))
        table = _table(pairs, rng)
        shards: list[dict] = [{} for _ in range(256)]
        for k, v in table.items():
            shards[k[-1]][k] = v
        known = int(rng.integers(0, len(pairs) + 2))
        for args in ({"get": table.get}, {"shards": shards}):
            p, q = fast.prompt(toks, ns), slow.prompt(toks, ns)
            p.keys(known), q.keys(known)
            got, want = fast.walk(p, **args), slow.walk(q, **args)
            assert [id(x) for x in got] == [id(x) for x in want]
            assert p._keys == q._keys  # hashed as far as the walk went, no further


def test_walk_passes_errors_through():
    fast, _ = hashers(4, "xxh3")
    p = fast.prompt(list(range(8)), Namespace())

    def boom(key):
        raise RuntimeError("tier down")

    with pytest.raises(RuntimeError, match="tier down"):
        fast.walk(p, boom)
    assert len(p._keys) == 1  # the key was kept before the lookup failed, as in keys.py
    with pytest.raises(AttributeError):
        fast.walk(fast.prompt(list(range(8)), Namespace()), {}.fromkeys(p._keys, object()).get)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**31 - 1), max_size=70),
    st.integers(1, 9),
    st.sampled_from(HASHES),
    st.binary(max_size=12),
)
def test_keys_match_for_any_tokens(tokens, block_size, hash_name, salt):
    fast, slow = hashers(block_size, hash_name)
    ns = Namespace("t", salt=salt)
    assert fast.keys(tokens, ns) == slow.keys(tokens, ns)
    arr = np.array(tokens, dtype=np.int64)
    assert fast.keys(arr, ns) == slow.keys(arr, ns)


def _describe(env: dict[str, str], pre: str = "") -> str:
    code = f"{pre}\nfrom ctxcache import accel; print(accel.describe()['key_walk'], accel.describe()['reason'])"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(SRC), **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_fallback_is_chosen_at_import():
    assert _describe({"CTXCACHE_NO_NATIVE": ""}).startswith("native")
    assert _describe({"CTXCACHE_NO_NATIVE": "1"}) == "python disabled by CTXCACHE_NO_NATIVE=1"
    # No compiler at install: the module is absent, and ctxcache still imports and hashes.
    absent = "import sys; sys.modules['ctxcache._native'] = None"
    assert _describe({"CTXCACHE_NO_NATIVE": ""}, absent).startswith("python not built")


active = pytest.mark.skipif(accel.native is None, reason=f"the compiled walk is not active: {accel.reason}")


@active
def test_use_native_switches_later_hashers(monkeypatch):
    monkeypatch.setattr(accel, "native", accel.native)
    monkeypatch.setattr(accel, "reason", accel.reason)
    accel.use_native(False)
    assert BlockHasher(4)._native is None and accel.describe()["key_walk"] == "python"
    accel.use_native(True)
    assert BlockHasher(4)._native is native and accel.describe()["key_walk"] == "native"
    assert accel.describe()["lru_fifo_order"] == "native"
    assert accel.describe()["sim_replay"] == "native"


@active
def test_cli_reports_and_switches_the_key_walk(monkeypatch):
    from typer.testing import CliRunner

    from ctxcache.cli import app

    monkeypatch.setattr(accel, "native", accel.native)
    monkeypatch.setattr(accel, "reason", accel.reason)
    assert "key walk: native (built)" in CliRunner().invoke(app, ["version"]).output
    res = CliRunner().invoke(app, ["--no-native", "version"])
    assert res.exit_code == 0 and "key walk: python (disabled (--no-native))" in res.output
    assert "LRU/FIFO order: python" in res.output


class _Shard(dict):
    def get(self, key, default=None):  # not an exact dict: called as a method, as Python would
        return ("sub", super().get(key, default))


def test_shard_get_many_is_the_comprehension():
    # tiers/memory.py's get_many: [shards[hash(k) % p].get(k) for k in keys], negative hashes included.
    rng = np.random.default_rng(3)
    keys = [bytes(rng.integers(0, 256, 16, dtype=np.uint8)) for _ in range(300)]
    keys += [-1, -2, -(2**62), 2**64, 0, 7, "s", ("t", 1), (-5,), 1.5, None, b""]
    for p in (1, 7, 241):
        shards = [_Shard() if i % 5 == 3 else {} for i in range(p)]
        for k in keys[::2]:
            shards[hash(k) % p][k] = ("v", k)
        want = [shards[hash(k) % p].get(k) for k in keys]
        assert native.shard_get_many(shards, keys, p) == want
        assert native.shard_get_many(shards, tuple(keys), p) == want
        assert native.shard_get_many(shards, iter(keys), p) == want
        assert native.shard_get_many(shards, [], p) == []
    with pytest.raises(TypeError, match="unhashable"):
        native.shard_get_many([{}], [b"a", [1]], 1)
    with pytest.raises(ValueError, match="p shards"):
        native.shard_get_many([{}], [b"a"], 2)
    with pytest.raises(TypeError):
        native.shard_get_many([{}], 5, 1)


def test_memory_tier_get_many_is_compiled_or_python():
    from ctxcache.tiers.memory import MemoryTier

    fast, slow = MemoryTier(10**6), MemoryTier(10**6)
    assert fast._gets is native.shard_get_many or not accel.native
    slow._gets = None
    for t in (fast, slow):
        for i in range(50):
            t.put(bytes([i]) * 16, bytes(i))
    keys = [bytes([i]) * 16 for i in range(0, 100, 3)]
    assert fast.get_many(keys) == slow.get_many(keys) == [bytes(i) if i < 50 else None for i in range(0, 100, 3)]
