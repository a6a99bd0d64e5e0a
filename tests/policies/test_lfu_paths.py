"""LFU's promises that only a veto shows (lfu.py): a refused key is in use, so it goes behind the
keys of its count (second chance) instead of being the first candidate again."""

from __future__ import annotations

from ctxcache.policies.lfu import LFU

from .helpers import drain


def test_a_refused_key_goes_behind_its_equals():
    p = LFU()
    for k in range(4):
        p.on_insert(k)  # all at count 1, oldest first
    assert p.evict(lambda k: k != 0) == 1  # 0 is in use (pinned, or a parent)
    # 0 had its second chance: the other count-1 keys go before it, and a count-2 key last.
    p.on_hit(2)
    assert drain(p) == [3, 0, 2]


def test_peek_with_a_veto_does_not_rotate():
    p = LFU()
    for k in range(3):
        p.on_insert(k)
    assert p.peek(lambda k: k != 0) == 1
    assert p.evict() == 0  # peek only looked: 0 is still the oldest count-1 key
