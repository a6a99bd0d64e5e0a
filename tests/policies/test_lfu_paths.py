"""LFU's promises that only a veto shows (lfu.py): a refused key is in use, so the refusal counts
as a use and the key is not the first candidate again."""

from __future__ import annotations

from ctxcache.policies.lfu import LFU

from .helpers import drain


def test_a_refusal_counts_as_a_use():
    p = LFU()
    for k in range(4):
        p.on_insert(k)  # all at count 1, oldest first
    p.on_hit(3)  # count 2, before 0 gets there
    assert p.evict(lambda k: k != 0) == 1  # 0 is in use (pinned, or a parent)
    # 0 now has 2 uses: it goes after the count-1 key and after 3, which reached count 2 first.
    # Going only behind its equals left it at count 1, before 3: [2, 0, 3].
    assert drain(p) == [2, 3, 0]


def test_peek_with_a_veto_does_not_rotate():
    p = LFU()
    for k in range(3):
        p.on_insert(k)
    assert p.peek(lambda k: k != 0) == 1
    assert p.evict() == 0  # peek only looked: 0 is still the oldest count-1 key
