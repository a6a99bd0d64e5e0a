"""S3-FIFO (s3fifo.py) under a veto: evict returns None only when nothing may go, including when
the one allowed key sits in small and earns main on the way (it is then taken from main)."""

from __future__ import annotations

from ctxcache.policies.s3fifo import S3FIFO


def test_an_allowed_key_that_small_promotes_is_taken_from_main():
    p = S3FIFO(capacity=10)  # small 1, main 9
    for k in range(11):
        p.on_insert(k)  # 0 fills small; before any eviction the rest go to main (10 > 9)
    assert p.queue_of(0) == "small" and p.queue_of(10) == "main"
    p.on_hits([0, 0])  # move_threshold hits: 0 moves to main when small is next looked at
    # Main is over its size, so it goes first, but refuses everything; small then promotes 0,
    # and main, looked at again, gives it up.
    assert p.evict(lambda k: k == 0) == 0
    assert 0 not in p and len(p) == 10


def test_nothing_allowed_gives_none_and_loses_no_key():
    p = S3FIFO(capacity=10)
    for k in range(11):
        p.on_insert(k)
    p.on_hits([0, 0])
    assert p.evict(lambda k: False) is None
    assert len(p) == 11 and all(k in p for k in range(11))
