"""LRU and FIFO keep their order in ``ORDER_SHARDS`` dicts (no O(n) resize of one map of every key) and must
still pick exactly the victims one global OrderedDict would: the reference below is the
single-OrderedDict implementation they replaced, second chance for refused keys included."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcache.policies import make_policy
from ctxcache.policies.base import CanEvict


class Reference:
    def __init__(self, lru: bool) -> None:
        self.order: OrderedDict[Hashable, None] = OrderedDict()
        self.lru = lru

    def on_insert(self, key: Hashable) -> None:
        self.order[key] = None

    def on_hit(self, key: Hashable) -> None:
        if self.lru:
            self.order.move_to_end(key)

    def on_remove(self, key: Hashable) -> None:
        self.order.pop(key, None)

    def peek(self, can_evict: CanEvict) -> Hashable | None:
        return next((k for k in self.order if can_evict is None or can_evict(k)), None)

    def evict(self, can_evict: CanEvict) -> Hashable | None:
        for _ in range(len(self.order)):
            key = next(iter(self.order))
            if can_evict is None or can_evict(key):
                del self.order[key]
                return key
            self.order.move_to_end(key)
        return None


# Bytes keys land in the shard of their last byte, ints in hash % 251: both kinds, many shards.
KEY_POOL = [os.urandom(16) for _ in range(24)] + list(range(24))
OPS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "hit", "hits", "remove", "evict", "peek"]), st.integers(0, 47), st.integers(0, 3)
    ),
    max_size=300,
)


def refuse_mod(m: int) -> Callable[[Hashable], bool] | None:
    """m == 0: everything may go; else refuse keys whose pool position is 0 mod m."""
    if m == 0:
        return None
    pos = {k: i for i, k in enumerate(KEY_POOL)}
    return lambda k: pos[k] % (m + 1) != 0


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["lru", "fifo"]), OPS)
def test_sharded_order_picks_the_same_victims_as_one_ordered_dict(name, ops):
    pol, ref = make_policy(name), Reference(lru=name == "lru")
    for op, i, m in ops:
        key = KEY_POOL[i]
        if op == "insert":
            if key not in ref.order:
                pol.on_insert(key)
                ref.on_insert(key)
        elif op in ("hit", "hits") and key in ref.order:
            keys = [key, KEY_POOL[(i + 7) % 48]] if op == "hits" else [key]
            keys = [k for k in keys if k in ref.order]
            pol.on_hits(keys)
            for k in keys:
                ref.on_hit(k)
        elif op == "remove":
            pol.on_remove(key)
            ref.on_remove(key)
        elif op == "peek":
            assert pol.peek(refuse_mod(m)) == ref.peek(refuse_mod(m))
        elif op == "evict":
            assert pol.evict(refuse_mod(m)) == ref.evict(refuse_mod(m))
        assert len(pol) == len(ref.order)
        assert all((k in pol) == (k in ref.order) for k in KEY_POOL)
    while ref.order:  # drain: the whole remaining order agrees
        assert pol.evict() == ref.evict(None)
    assert pol.evict() is None and len(pol) == 0


def test_a_batch_of_hits_with_a_key_that_is_not_resident_keeps_the_order():
    """``on_hits`` raises KeyError at a key that is not resident; the keys before it were moved
    and the stamps handed out stay used, so later moves still go behind them."""
    lru = make_policy("lru")
    keys = [bytes([i]) * 16 for i in range(6)]
    for k in keys:
        lru.on_insert(k)
    with pytest.raises(KeyError):
        lru.on_hits([keys[0], b"absent" * 3, keys[1]])
    lru.on_hits([keys[2]])
    assert [lru.evict() for _ in keys] == [keys[1], keys[3], keys[4], keys[5], keys[0], keys[2]]
