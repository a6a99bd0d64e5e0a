"""Golden results: every registered policy's exact misses and hit tokens on the head of the real
conversation trace, at two cache sizes (libCacheSim's golden miss-ratio tests, for this project).

Any change to what a policy evicts changes these numbers, including the ones no unit test
describes (prefix-aware's learned hit densities, Belady's ordering, tie-breaks). A change that is
meant must update them here and say why in the commit; docs/testing.md lists the mutants only
these tests kill.
"""

from __future__ import annotations

import pytest

from ctxcache.policies import make_policy, policy_names
from ctxcache.sim.simulator import Trace, simulate

from ..conftest import FakeClock
from .test_batch_contract import sized

# (misses, hit tokens) on the first 3000 requests (55,287 unique blocks) at 1/20 and 1/5 of them.
GOLDEN: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "2q": ((74410, 3179008), (62127, 9467904)),
    "arc": ((74441, 3163136), (62596, 9227776)),
    "belady": ((58996, 11070976), (55310, 12958208)),
    "fifo": ((75793, 2470912), (62476, 9289216)),
    "lfu": ((74640, 3061248), (63336, 8848896)),
    "lfu-decay": ((74623, 3069952), (63085, 8977408)),
    "lirs": ((74472, 3147264), (63876, 8572416)),
    "lru": ((75674, 2531840), (62101, 9481216)),
    "prefix-aware": ((72054, 4385280), (62766, 9140736)),
    "s3fifo": ((73012, 3894784), (64425, 8291328)),
    "sieve": ((74640, 3061248), (63336, 8848896)),
    "ttl": ((75674, 2531840), (62101, 9481216)),
    "w-tinylfu": ((74468, 3149312), (66700, 7126528)),
}


def test_every_registered_policy_has_golden_results():
    assert sorted(GOLDEN) == sorted(policy_names())


@pytest.mark.parametrize("divisor", [20, 5])
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_misses_and_hit_tokens(name: str, divisor: int, trace_head: Trace) -> None:
    cap = trace_head.unique_blocks // divisor
    got = simulate(trace_head, make_policy(name, clock=FakeClock(), **sized(name, cap)), cap)
    assert (got.misses, got.hit_tokens) == GOLDEN[name][divisor == 5]
