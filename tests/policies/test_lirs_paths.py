"""LIRS without a capacity (the live cache's case, lirs.py): C is the most keys ever resident, so
the LIR set holds C - max(1, int(hir_ratio * C)) keys and later newcomers are HIR, first to go."""

from __future__ import annotations

from ctxcache.policies.lirs import LIRS

from .helpers import drain


def test_unsized_lir_set_is_sized_by_the_most_keys_ever_resident():
    p = LIRS()
    for k in range(10):
        p.on_insert(k)  # C = 10: the LIR set holds 9; key 0 came while it held 0 and is HIR
    assert p.evict() == 0
    p.on_insert(10)  # 10 resident again, not more: C stays 10 and the LIR set is full
    assert p.evict() == 10  # an HIR newcomer goes before every LIR key
    assert drain(p) == list(range(1, 10))  # then the LIR keys, oldest use first
