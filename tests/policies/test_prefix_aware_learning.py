"""prefix-aware once it has learned (docs/prefix-aware.md): classes without reuses of their own
borrow the pooled curve from the first refit on, and ``peek`` values blocks by their age."""

from __future__ import annotations

from ctxcache.policies.prefix_aware import PrefixAware

from ..conftest import FakeClock


def test_a_class_without_reuses_of_its_own_borrows_the_pooled_curve_from_the_first_refit():
    # "classes borrow prior lifetimes of the pooled curve": after one lifetime ended (a reuse in
    # class 0), class 1 has no evidence of its own and must rank like the pool, not as worthless.
    clock = FakeClock()
    p = PrefixAware(clock=clock, max_count=2, update_every=1, warmup=0)
    p.on_insert("a")
    p.on_insert("b")
    clock.advance(0.2)
    p.on_hit("a")  # the first lifetime ends: refit; "a" (count 2) moves to class 1
    assert p._learned and p._meta["a"][0] == 1 and p._meta["b"][0] == 0
    assert p._hd[0][0] > 0 and p._hd[1] == p._hd[0]  # class 0 alone makes the pool
    # Equal densities at equal age bins: the older block goes first.
    assert p.evict() == "b"


def test_peek_values_requeued_blocks_by_age_once_learned():
    # After every block was refused once, evict requeues them all; peek must name the same block,
    # valuing each by its age as evict does (hit densities are in use once learned).
    clock = FakeClock()
    p = PrefixAware(clock=clock, update_every=1, warmup=0)
    for k in "abc":
        p.on_insert(k)
        clock.advance(0.5)
    p.on_hit("a")  # one lifetime ended: learned from here on
    assert p._learned
    assert p.evict(lambda k: False) is None
    clock.advance(1.0)
    assert p.peek() == "b" == p.evict()
