"""The compiled LRU/FIFO order (native/ctxcache_order.c, ``_native.Order``) against the pure-Python
OrderedPolicy it replaces when built: the same operations on random inputs give the same results,
errors included, and the same victims to the last key (tests/policies/test_sharded_order.py
checks the policy, whichever runs, against one OrderedDict)."""

from __future__ import annotations

import os
import random
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcache import accel
from ctxcache.policies import make_policy
from ctxcache.policies.base import OrderedPolicy

Order = getattr(accel.native, "Order", None)
pytestmark = pytest.mark.skipif(Order is None, reason="ctxcache._native not built (pure-Python order only)")


@contextmanager
def python_order() -> Iterator[None]:
    """Policies made inside get the pure-Python order (what ``--no-native`` gives)."""
    saved = accel.native
    accel.native = None
    try:
        yield
    finally:
        accel.native = saved


def pair(name: str) -> tuple[OrderedPolicy, OrderedPolicy]:
    with python_order():
        py = make_policy(name)
    c = make_policy(name)
    assert not isinstance(py, Order) and isinstance(c, Order) and type(c).__name__ == type(py).__name__
    assert isinstance(py, OrderedPolicy) and isinstance(c, OrderedPolicy)
    return py, c  # type: ignore[return-value]


POOL = [os.urandom(16) for _ in range(20)] + list(range(-3, 17)) + [2**64 + 5, "s", (1, 2)]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "hit", "hits", "remove", "evict", "peek", "contains"]),
        st.integers(0, len(POOL) - 1),
        st.integers(0, 3),
    ),
    max_size=400,
)


def refuse(m: int) -> Callable[[Hashable], bool] | None:
    return None if m == 0 else (lambda k: POOL.index(k) % (m + 1) != 0)


def apply(p: OrderedPolicy, op: str, i: int, m: int) -> Any:
    """One operation on pool key ``i`` (``m``: which keys ``can_evict`` refuses, and list or iterator)."""
    key, other = POOL[i], POOL[(i * 7 + 3) % len(POOL)]
    try:
        if op == "insert":
            return p.on_insert(key)
        if op == "hit":
            return p.on_hit(key)  # KeyError when not resident (LRU)
        if op == "hits":
            return p.on_hits(iter([key, other]) if m else [key, other])
        if op == "remove":
            return p.on_remove(key)
        if op == "evict":
            return p.evict(refuse(m))
        if op == "peek":
            return p.peek(refuse(m))
        return (key in p, p.__contains__(other))
    except KeyError as exc:
        return ("KeyError", exc.args)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["lru", "fifo"]), OPS)
def test_compiled_and_python_orders_agree_on_random_operations(name, ops):
    py, c = pair(name)
    for op, i, m in ops:
        assert apply(c, op, i, m) == apply(py, op, i, m), op
        assert len(c) == len(py)
    while len(py):
        assert c.evict() == py.evict()
    assert c.evict() is None and c.peek() is None and len(c) == 0


def test_many_keys_grow_and_shrink_like_an_ordered_dict():
    """Past several doublings of every shard table and back (removals shift probe runs back):
    the order of 60,000 int and bytes keys matches an OrderedDict's after random hits and removals."""
    rng = random.Random(30)
    lru = make_policy("lru")
    ref: OrderedDict[Hashable, None] = OrderedDict()
    keys: list[Hashable] = [rng.getrandbits(62) for _ in range(30_000)] + [os.urandom(8) for _ in range(30_000)]
    for k in keys:
        lru.on_insert(k)
        ref[k] = None
    for _ in range(40_000):
        k = keys[rng.randrange(len(keys))]
        if rng.random() < 0.5:
            lru.on_remove(k)
            ref.pop(k, None)
        elif k in ref:
            lru.on_hit(k)
            ref.move_to_end(k)
        else:
            assert k not in lru
    assert len(lru) == len(ref) and all(k in lru for k in ref)
    assert lru.order_keys() == list(ref)  # type: ignore[attr-defined]
    assert [lru.evict() for _ in range(len(ref))] == list(ref) and len(lru) == 0


def test_the_order_holds_one_reference_per_key_and_releases_it():
    import sys

    key = os.urandom(16)
    base = sys.getrefcount(key)
    lru = make_policy("lru")
    lru.on_insert(key)
    lru.on_insert(key)  # resident: keeps its place, no second reference
    assert sys.getrefcount(key) == base + 1
    lru.on_remove(key)
    assert sys.getrefcount(key) == base
    lru.on_insert(key)
    del lru
    assert sys.getrefcount(key) == base


def test_a_callback_that_changes_the_order_is_refused():
    lru = make_policy("lru")
    for k in range(4):
        lru.on_insert(k)
    with pytest.raises(RuntimeError):
        lru.evict(lambda k: lru.on_remove(3) or True)
    with pytest.raises(TypeError):
        lru.on_insert([1])  # unhashable, as in a dict

    class Meddler:
        """Hashes like 7, and its __eq__ inserts keys (its table may grow under the probe)."""

        def __hash__(self) -> int:
            return 7

        def __eq__(self, other: object) -> bool:
            for k in range(100, 200):
                lru.on_insert(k)
            return False

    lru.on_insert(7)
    with pytest.raises(RuntimeError):
        lru.on_insert(Meddler())


def test_no_native_switch_gives_the_python_order():
    accel.use_native(False)
    try:
        assert not isinstance(make_policy("lru"), Order)
    finally:
        accel.use_native(True)
    assert isinstance(make_policy("fifo"), Order)


def test_a_subclass_that_overrides_an_order_method_keeps_the_python_order():
    """Its ``super().evict`` must reach the order it was built on (tests/sim's leaf checks)."""
    from ctxcache.policies.lru import LRU

    class Checked(LRU):
        def evict(self, can_evict=None):
            return super().evict(can_evict)

    class Named(LRU):
        def params(self):
            return {"x": 1}

    checked, named = Checked(), Named()
    assert not isinstance(checked, Order) and isinstance(named, Order) and isinstance(named, Named)
    for p in (checked, named):
        p.on_insert(1)
        p.on_insert(2)
        p.on_hit(1)
        assert p.evict() == 2 and len(p) == 1


def test_either_order_loads_what_the_other_pickled():
    import pickle

    py, c = pair("lru")
    for p in (py, c):
        for k in (5, b"a", 7, 9):
            p.on_insert(k)
        p.on_hit(5)
        p.extra = "kept"
    with python_order():
        from_c = pickle.loads(pickle.dumps(c))
    from_py = pickle.loads(pickle.dumps(py))
    assert not isinstance(from_c, Order) and isinstance(from_py, Order)
    for p in (from_c, from_py):
        assert type(p).__name__ == "LRU" and p.extra == "kept" and p.clock is c.clock
        assert [p.evict() for _ in range(4)] == [b"a", 7, 9, 5]
