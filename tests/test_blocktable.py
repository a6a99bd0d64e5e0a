"""The block table (issue 30's first slice of a compiled index): ``_native.BlockTable``
(native/ctxcache_blocks*.c) against its pure-Python reference ``blocktable.PyBlockTable``.

Random operation sequences, hostile arguments included, run on both and every result and error
type must agree, as must the whole state after (slots, fields, LRU order). Then growth past
200,000 blocks with removals and reinsertions. Without the compiled module (``CTXCACHE_NO_NATIVE=1``
or not built) the comparisons skip and the reference's own checks still run.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from ctxcache import accel
from ctxcache.blocktable import PyBlockTable, block_table

Native = getattr(accel.native, "BlockTable", None)
needs_native = pytest.mark.skipif(Native is None, reason="ctxcache._native (with BlockTable) not in use")
IMPLS = [PyBlockTable] + ([Native] if Native is not None else [])


def outcome(fn: Callable[..., Any], *a: Any, **kw: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*a, **kw))
    except Exception as exc:  # the type is what must agree; messages may differ
        return ("err", type(exc))


def lru(t: Any) -> list[int]:
    out, s = [], t.lru_front()
    while s != -1:
        out.append(s)
        s = t.lru_next(s)
    return out


def snapshot(t: Any) -> tuple[Any, ...]:
    order = lru(t)
    fields = []
    for s in sorted(order):
        f = (t.key(s), t.parent(s), t.parent_key(s), t.depth(s), t.children(s), t.pins(s), t.tier(s), t.tag(s))
        fields.append((s, *f, t.tokens(s)))
        assert t.get(f[0]) == s and f[0] in t
    assert len(order) == len(t)
    return len(t), t.slots_used, order, fields


def tok(key: bytes, width: int = 64) -> bytes:
    return (key * (width // len(key) + 1))[:width]


class Evil:
    """An int whose ``__index__`` changes the table first: the call must see the changed table."""

    def __init__(self, fn: Callable[[], Any], value: int) -> None:
        self.fn, self.value = fn, value

    def __index__(self) -> int:
        self.fn()
        return self.value


class Fresh(list):  # type: ignore[type-arg]
    """Keys to pass as a new iterator to each table (an iterator is consumed once)."""


class Keyish(bytes):
    def __eq__(self, other: object) -> bool:
        raise AssertionError("a key's __eq__ must not run")

    __hash__ = bytes.__hash__


def random_op(rng: random.Random, pool: list[bytes], roots: list[Any], used: int) -> tuple[str, tuple, dict]:
    def key() -> Any:
        r = rng.random()
        if r < 0.93:
            return rng.choice(pool)
        return rng.choice([b"short", "str", 7, None, bytearray(16), Keyish(pool[0]), b"x" * 17])

    def slot() -> Any:
        r = rng.random()
        if r < 0.85:
            return rng.randint(-2, used + 2)
        return rng.choice(["1", 2**70, -(2**70), True, np.int64(1), 1.0, None])

    def uint() -> Any:
        return rng.choice([0, 1, 2, 3, 255, 256, -1, 2**32 - 1, 2**32, "3", np.uint8(4), False])

    def tokens(k: Any) -> Any:
        data = tok(k) if isinstance(k, bytes) and len(k) == 16 else b"\0" * 64
        r = rng.random()
        if r < 0.85:
            return data
        return rng.choice(
            [
                data[:63],
                data + b"!",
                bytearray(data),
                np.frombuffer(data, np.int32),
                "s" * 64,
                np.frombuffer(data * 2, np.int32)[::2],
                memoryview(data),
                b"\1" * 64,
            ]
        )

    op = rng.choice(
        ["insert"] * 6
        + ["remove"] * 3
        + ["match"] * 3
        + [
            "get",
            "contains",
            "key",
            "tokens",
            "parent",
            "parent_key",
            "depth",
            "children",
            "pins",
            "tier",
            "tag",
            "set_tier",
            "pin",
            "pin",
            "unpin",
            "lru_touch",
            "lru_touch",
            "lru_front",
            "lru_next",
        ]
    )
    if op == "insert":
        k, depth = key(), rng.choice([0, 0, 1, 2, 5, uint()])
        parent = rng.choice(roots) if depth == 0 and rng.random() < 0.8 else key()
        args = (k, parent, tokens(k), depth) + ((uint(),) if rng.random() < 0.5 else ())
        return op, args, {}
    if op == "match":
        ks = [key() for _ in range(rng.randint(0, 5))]
        buf = b"".join(tok(k) if isinstance(k, bytes) and len(k) == 16 else b"\0" * 64 for k in ks)
        if rng.random() < 0.2 and buf:
            i = rng.randrange(len(buf))
            buf = buf[:i] + bytes([buf[i] ^ 1]) + buf[i + 1 :]
        if rng.random() < 0.05:
            buf = buf[:-1]
        kw: dict[str, Any] = {"touch": rng.random() < 0.5}
        if rng.random() < 0.5:
            kw["slots"] = rng.choice([[], [], (), "x"])
        return op, (rng.choice([ks, tuple(ks), Fresh(ks)]) if rng.random() < 0.9 else 5, buf), kw
    if op in ("get", "contains", "remove"):
        return op, (key(),), {}
    if op == "lru_front":
        return op, (), {}
    if op == "set_tier":
        return op, (slot(), uint()), {}
    return op, (slot(),), {}


def apply(t: Any, op: str, args: tuple, kw: dict) -> tuple[str, Any]:
    if args and isinstance(args[0], Fresh):
        args = (iter(list(args[0])), *args[1:])
    if op == "contains":
        return outcome(lambda: args[0] in t)
    if op == "match" and isinstance(kw.get("slots"), list):
        kw = {**kw, "slots": []}
        got = outcome(t.match, *args, **kw)
        return got[0], (got[1], kw["slots"])
    return outcome(getattr(t, op), *args, **kw)


@needs_native
@pytest.mark.parametrize("seed", range(40))
def test_random_operations_agree(seed: int) -> None:
    rng = random.Random(seed)
    pool = [rng.randbytes(16) for _ in range(24)]
    roots = [rng.randbytes(16) for _ in range(3)] + [None]
    py, c = PyBlockTable(), Native()
    for step in range(400):
        op, args, kw = random_op(rng, pool, roots, py.slots_used)
        want, got = apply(py, op, args, kw), apply(c, op, args, kw)
        assert got == want, (seed, step, op, args, kw)
        if step % 25 == 0:
            assert snapshot(c) == snapshot(py), (seed, step)
    assert snapshot(c) == snapshot(py)


@pytest.mark.parametrize("impl", IMPLS)
def test_chains_children_pins_and_roots(impl: type) -> None:
    t = impl()
    a, b, c, root = b"a" * 16, b"b" * 16, b"c" * 16, b"R" * 16
    sa = t.insert(a, root, tok(a), 0, 9)
    sb = t.insert(b, a, np.frombuffer(tok(b), np.int32), 1)
    assert (t.children(sa), t.parent(sb), t.parent_key(sb), t.parent(sa), t.parent_key(sa)) == (1, sa, a, -1, root)
    assert (t.tag(sa), t.tag(sb), t.depth(sb), t.tier(sb), t.tokens(sb)) == (9, 0, 1, 0, tok(b))
    with pytest.raises(KeyError):
        t.insert(b, a, tok(b), 1)
    with pytest.raises(KeyError):
        t.insert(c, b"z" * 16, tok(c), 1)
    with pytest.raises(ValueError):
        t.remove(a)  # has a child
    assert t.pin(sb) == 1 and t.pin(sb) == 2
    with pytest.raises(ValueError):
        t.remove(b)  # pinned
    assert t.unpin(sb) == 1 and t.unpin(sb) == 0
    with pytest.raises(ValueError):
        t.unpin(sb)
    assert lru(t) == [sa, sb]
    slots: list[int] = []
    assert t.match([a, b, c], tok(a) + tok(b) + tok(c), touch=True, slots=slots) == 2 and slots == [sa, sb]
    assert t.match([a, b], tok(a) + tok(c)) == 1  # b's key with other tokens: a collision is a miss
    t.lru_touch(sa)
    assert lru(t) == [sb, sa] and t.lru_front() == sb
    t.set_tier(sb, 3)
    assert t.tier(sb) == 3
    t.remove(b)
    assert t.children(sa) == 0 and t.get(b) == -1 and len(t) == 1
    with pytest.raises(IndexError):
        t.depth(sb)  # freed
    assert t.insert(c, None, tok(c), 0) == sb  # the last freed slot first
    assert t.parent_key(sb) is None and t.tier(sb) == 0


@pytest.mark.parametrize("impl", IMPLS)
def test_hostile_arguments(impl: type) -> None:
    t = impl()
    k = b"k" * 16
    s = t.insert(k, None, tok(k), 0)
    for bad, exc in [((k, None, tok(k)), TypeError), ((k, None, tok(k), 0, 0, 0), TypeError)]:
        with pytest.raises(exc):
            t.insert(*bad)
    with pytest.raises(TypeError):
        t.insert(k, None, tok(k), depth=0)  # positional only
    with pytest.raises(ValueError):
        t.insert(b"n" * 16, None, tok(k), 1)  # depth > 0 without a parent
    with pytest.raises(BufferError):
        t.insert(b"n" * 16, None, np.frombuffer(tok(k) * 2, np.int32)[::2], 0)
    for slot, exc in [(-1, IndexError), (1, IndexError), (2**64, IndexError), ("0", TypeError), (0.0, TypeError)]:
        with pytest.raises(exc):
            t.pins(slot)
    with pytest.raises(ValueError):
        t.set_tier(s, 256)
    assert t.get(Keyish(k)) == s and Keyish(k) in t  # no __eq__ runs
    with pytest.raises(TypeError):
        t.match([k], tok(k), slots=(1,))
    with pytest.raises(ValueError):
        t.match([k, k], tok(k))
    with pytest.raises(TypeError):
        t.get(bytearray(k))
    for args in [(0,), (16, 0), (257,), (16, 2**20 + 1), ("16",), (-1,)]:
        with pytest.raises((ValueError, TypeError)):
            impl(*args)
    # an __index__ that removes the block first: the call sees it gone
    with pytest.raises(IndexError):
        t.set_tier(Evil(lambda: t.remove(k), s), 1)
    assert len(t) == 0 and t.lru_front() == -1
    # one that inserts the key the call is about to insert
    k2 = b"2" * 16
    with pytest.raises(KeyError):
        t.insert(k2, None, tok(k2), Evil(lambda: t.insert(k2, None, tok(k2), 0), 0))
    assert len(t) == 1


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("widths", [(8, 4), (32, 1024), (1, 1), (256, 1 << 20)])
def test_other_widths(impl: type, widths: tuple[int, int]) -> None:
    kw, tb = widths
    t = impl(kw, token_bytes=tb)
    rng = random.Random(kw)
    keys = list({rng.randbytes(kw) for _ in range(40 if tb < 1 << 20 else 3)})
    for i, k in enumerate(keys):
        assert t.insert(k, keys[i - 1] if i else None, tok(k, tb), i) == i
    assert t.match(keys, b"".join(tok(k, tb) for k in keys)) == len(keys) and t.key_width == kw
    with pytest.raises(ValueError):
        t.insert(bytes(kw + 1), None, bytes(tb), 0)


def grow(t: Any, keys: list[bytes]) -> None:
    """Chains of 8; then a third of the leaves leave, then half of those come back."""
    for i, k in enumerate(keys):
        t.insert(k, keys[i - 1] if i % 8 else k[::-1], tok(k), i % 8, i % 5)
    gone = [k for i, k in enumerate(keys) if i % 8 == 7 and i % 3 == 0]
    for k in gone:
        t.remove(k)
    for i, k in enumerate(gone[::2]):
        t.insert(k, keys[keys.index(k) - 1] if i < 50 else keys[0], tok(k), 7, 1)


@pytest.mark.parametrize("impl", IMPLS)
def test_growth_past_200k_blocks(impl: type) -> None:
    rng = random.Random(30)
    keys = [rng.randbytes(16) for _ in range(208_000)]
    t = impl()
    grow(t, keys)
    gone = {k for i, k in enumerate(keys) if i % 8 == 7 and i % 3 == 0}
    back = set(list(k for i, k in enumerate(keys) if i % 8 == 7 and i % 3 == 0)[::2])
    assert len(t) == len(keys) - len(gone) + len(back)
    for i in rng.sample(range(len(keys)), 20_000):
        k = keys[i]
        s = t.get(k)
        assert (s == -1) == (k in gone - back)
        if s != -1:
            assert t.key(s) == k and t.tokens(s) == tok(k) and t.depth(s) == i % 8
    for c in rng.sample(range(len(keys) // 8), 2_000):
        chain = keys[c * 8 : c * 8 + 8]
        want = 8 if chain[-1] not in gone - back else 7
        assert t.match(chain, b"".join(tok(k) for k in chain)) == want
    if impl is not PyBlockTable:
        assert t.memory_bytes() < 150 * len(keys)
        py = PyBlockTable()
        grow(py, keys)
        assert lru(t) == lru(py) and [py.get(k) for k in keys] == [t.get(k) for k in keys]
    del t
    gc.collect()


def test_block_table_picks_the_module_in_use() -> None:
    t = block_table(16, 64)
    assert isinstance(t, Native if Native is not None else PyBlockTable)
