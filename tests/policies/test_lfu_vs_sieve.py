"""lfu and sieve give identical results on the conversation trace (docs/policies.md says why).

While a never-used, never-refused key can be evicted, both take the oldest such key: lfu's count-1
bucket and the unswept part of sieve's queue (before the hand's first wrap) hold the same keys in
insertion order, and a hit or a refusal takes a key out of both (count 2, or passed by the hand).
They part only once the hand wraps: sieve then takes keys whose one visit it has already spent,
where lfu still prefers a key used fewer times. These tests pin that, so a later change to either
rule, or a trace on which they agree by accident, shows up here and not as an unexplained golden.
"""

from __future__ import annotations

from typing import Any

from ctxcache.cli import default_trace
from ctxcache.policies import make_policy
from ctxcache.policies.lfu import LFU
from ctxcache.policies.sieve import Sieve
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import read_mooncake


class _WrapCountingSieve(Sieve):
    name = "sieve"  # not registered: a subclass only to see the hand wrap

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.wraps_after: list[int] = []  # evictions completed when each wrap happened
        self.victims: list[Any] = []

    def _wrap(self) -> None:
        if len(self):  # the constructor's and empty-queue wraps are no round
            self.wraps_after.append(len(self.victims))
        super()._wrap()

    def evict(self, can_evict: Any = None) -> Any:
        key = super().evict(can_evict)
        self.victims.append(key)
        return key


class _CountingLFU(LFU):
    name = "lfu"

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.victims: list[Any] = []
        self.victim_counts: set[int] = set()

    def evict(self, can_evict: Any = None) -> Any:
        key = self.peek(can_evict)
        if key is not None:
            self.victim_counts.add(self._count[key])
        got = super().evict(can_evict)
        self.victims.append(got)
        return got


def test_they_agree_on_never_used_keys_and_part_once_the_hand_wraps():
    lfu, sieve = make_policy("lfu"), make_policy("sieve")
    for p in (lfu, sieve):
        for k in "abc":
            p.on_insert(k)
        p.on_hits("aab")
    assert lfu.evict() == sieve.evict() == "c"  # the only never-used key, for both
    for p in (lfu, sieve):
        p.on_insert("d")
    # sieve's hand passed a and b (clearing their bits) and wrapped: a is next. lfu keeps them
    # (3 and 2 uses) and takes the new key with 1.
    assert (lfu.evict(), sieve.evict()) == ("d", "a")


def test_on_the_conversation_trace_head_the_hand_never_wraps(trace_head: Trace) -> None:
    cap = trace_head.unique_blocks // 5
    sieve, lfu = _WrapCountingSieve(), _CountingLFU()
    simulate(trace_head, sieve, cap)
    simulate(trace_head, lfu, cap)
    assert sieve.wraps_after == []
    assert lfu.victim_counts == {1}  # every victim had never been used
    assert len(sieve.victims) == 49286
    assert sieve.victims == lfu.victims


def test_on_the_synthetic_trace_they_agree_until_the_first_wrap():
    trace = Trace(list(read_mooncake(default_trace("mooncake_synthetic_trace.jsonl"), limit=1000)))
    cap = trace.capacity(0.01)
    sieve, lfu = _WrapCountingSieve(), _CountingLFU()
    simulate(trace, sieve, cap)
    simulate(trace, lfu, cap)
    first_wrap = sieve.wraps_after[0]
    assert 0 < first_wrap < len(sieve.victims)
    assert sieve.victims[:first_wrap] == lfu.victims[:first_wrap]
    assert sieve.victims != lfu.victims
    assert lfu.victim_counts > {1}  # lfu did evict used keys here, once no unused one was left
