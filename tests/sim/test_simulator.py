from __future__ import annotations

import random

import numpy as np
import pytest

from ctxcache.cli import default_trace
from ctxcache.errors import ConfigError
from ctxcache.policies import policy_names
from ctxcache.policies.fifo import FIFO
from ctxcache.policies.lru import LRU
from ctxcache.sim.costmodel import get_cost_model
from ctxcache.sim.report import miss, render_table, run_grid
from ctxcache.sim.simulator import Trace, simulate
from ctxcache.sim.traces import Request, read_mooncake

BS = 512
NEVER = np.iinfo(np.int64).max


def req(blocks: list[int], tokens: int | None = None, t: float = 0.0) -> Request:
    """A request over ``blocks``; by default every block is full."""
    return Request(
        time=t, input_length=len(blocks) * BS if tokens is None else tokens, output_length=1, blocks=tuple(blocks)
    )


def trace_of(*reqs: Request) -> Trace:
    return Trace(list(reqs))


# -- Trace ------------------------------------------------------------------------------------------


def test_capacity_rounds_half_up_and_takes_block_counts():
    tr = trace_of(req(list(range(10))))
    assert tr.unique_blocks == 10
    assert tr.capacity(0.25) == 3  # 2.5 rounds up
    assert tr.capacity(0.24) == 2
    assert tr.capacity(0.001) == 1  # never 0
    assert tr.capacity(1.0) == 10  # 1.0 is the whole working set, not one block
    assert tr.capacity(2.0) == 2  # > 1 is a block count
    assert tr.capacity(7.9) == 7


@pytest.mark.parametrize("bad", [0, -0.5, -3, float("nan")])
def test_capacity_rejects_non_positive_sizes(bad):
    with pytest.raises(ConfigError, match="size must be > 0"):
        trace_of(req([1])).capacity(bad)


def test_simulate_rejects_bad_capacity_and_semantics():
    tr = trace_of(req([1]))
    with pytest.raises(ConfigError, match="capacity"):
        simulate(tr, "lru", 0)
    with pytest.raises(ConfigError, match="unknown semantics"):
        simulate(tr, "lru", 1, semantics="bogus")


def test_next_use_points_at_the_next_access_of_the_same_block():
    tr = trace_of(req([1, 2]), req([1, 3]), req([2, 1]))  # stream 1 2 1 3 2 1
    assert tr.stream.tolist() == [1, 2, 1, 3, 2, 1]
    assert tr.next_use.tolist() == [2, 4, 5, NEVER, NEVER, NEVER]
    assert tr.offsets.tolist() == [0, 2, 4, 6]


# -- prefix semantics -------------------------------------------------------------------------------


def test_a_request_hits_only_its_longest_resident_leading_run():
    tr = trace_of(req([1, 2, 3]), req([1, 2, 9]), req([5, 2, 3]))
    r = simulate(tr, "lru", 100)
    # Request 2 hits 1, 2 (not 9); request 3 starts with a new block, so its resident 2, 3
    # (under another parent) are no hit at all.
    assert r.hit_tokens == 2 * BS
    assert r.misses == 3 + 1 + 3
    assert r.block_accesses == 9
    assert r.miss_ratio == pytest.approx(7 / 9)


def test_token_hit_ratio_arithmetic_with_a_partial_last_block():
    # 1000 tokens = one full block (512) + a partial one (488) that the live cache never stores.
    tr = trace_of(req([1, 2], tokens=1000), req([1, 2, 3], tokens=1400))
    r = simulate(tr, "lru", 100)
    assert r.input_tokens == 2400
    assert r.hit_tokens == 512  # block 1 only: block 2 was partial in request 1
    assert r.token_hit_ratio == pytest.approx(512 / 2400)
    assert r.misses == 2 + 2


def test_trailing_partial_blocks_are_cached_only_with_partial_true():
    tr = trace_of(req([1, 2], tokens=1000), req([1, 2], tokens=1000))
    assert simulate(tr, "lru", 100).hit_tokens == 512
    raw = simulate(tr, "lru", 100, partial=True)
    assert raw.hit_tokens == 1000  # a full hit counts the request's own length, not n * 512
    assert raw.misses == 2


def test_est_prefill_saved_uses_the_cost_model():
    cost = get_cost_model("gemma3-270m-cpu")
    tr = trace_of(req([1, 2]), req([1, 2, 3]))
    r = simulate(tr, "lru", 100, cost_model=cost)
    assert r.est_prefill_s_saved == pytest.approx(cost.saved_s(3 * BS, 2 * BS))
    assert simulate(tr, "lru", 100).est_prefill_s_saved == 0.0


class _LeafCheck:
    """Mixin: every victim must be a leaf of the simulator's radix index when chosen."""

    def attach(self, index):
        self.index = index
        self.victims = []

    def evict(self, can_evict=None):
        victim = super().evict(can_evict)
        if victim is not None:
            node = self.index.get(victim)
            assert node.children == 0 and node.pins == 0, f"evicted {victim} with children or pins"
            self.victims.append(victim)
        return victim


class FifoLeafCheck(_LeafCheck, FIFO):
    pass


class LruLeafCheck(_LeafCheck, LRU):
    pass


def test_parents_are_never_evicted_before_children():
    # FIFO would pick block 1 (oldest) first; the index must veto it while 2 and 3 hang below it.
    pol = FifoLeafCheck()
    tr = trace_of(req([1]), req([1, 2]), req([1, 2, 3]), req([7]), req([8]))
    r = simulate(tr, pol, 3)
    assert pol.victims == [3, 2]
    assert r.misses == 1 + 1 + 1 + 1 + 1


@pytest.mark.parametrize("cls", [FifoLeafCheck, LruLeafCheck])
def test_parents_outlive_children_on_a_random_tree(cls):
    rng = random.Random(7)
    chains = [[1]]
    for i in range(2, 200):  # a random tree of chains sharing prefixes
        parent = rng.choice(chains)
        chains.append(parent[: rng.randint(1, len(parent))] + [i])
    tr = Trace([req(rng.choice(chains), t=float(i)) for i in range(400)])
    pol = cls()
    simulate(tr, pol, 12)
    assert pol.victims


# -- object semantics -------------------------------------------------------------------------------


def test_object_lru_and_fifo_miss_counts_by_hand():
    # Stream 1 2 1 3 1 2 with room for 2. LRU: m m h m(-2) h m(-3) = 4. FIFO: m m h m(-1) m(-2) m(-3) = 5.
    tr = trace_of(req([1, 2]), req([1, 3]), req([1, 2]))
    lru = simulate(tr, "lru", 2, semantics="object")
    assert (lru.misses, lru.block_accesses) == (4, 6)
    assert lru.miss_ratio == pytest.approx(4 / 6)
    assert lru.token_hit_ratio == 0.0  # tokens are a prefix-semantics notion
    assert simulate(tr, "fifo", 2, semantics="object").misses == 5


def test_object_belady_by_hand_and_never_worse_than_lru():
    tr = trace_of(req([1, 2]), req([1, 3]), req([1, 2]))
    # Stream 1 2 1 3 1 2, room for 2: at 3 Belady evicts 2 (next use 5, after 1's 4), so the
    # last access misses too: the 3 compulsory misses plus one. LRU does no better here.
    assert simulate(tr, "belady", 2, semantics="object").misses == 4
    rng = np.random.default_rng(0)
    ids = (rng.zipf(1.3, size=3000) % 400).tolist()
    rand = Trace([req(ids[i : i + 6], t=float(i)) for i in range(0, len(ids), 6)])
    for cap in (5, 20, 80, 200):
        b = simulate(rand, "belady", cap, semantics="object").misses
        assert b <= simulate(rand, "lru", cap, semantics="object").misses
        assert b <= simulate(rand, "fifo", cap, semantics="object").misses
        assert b >= rand.unique_blocks  # compulsory misses


# -- every registered policy ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_trace() -> Trace:
    path = default_trace("mooncake_synthetic_trace.jsonl")
    assert path.is_file(), f"shared trace missing at {path}"
    return Trace(list(read_mooncake(path, limit=150)))


@pytest.mark.parametrize("semantics", ["prefix", "object"])
def test_every_policy_runs_in_both_semantics(small_trace, semantics):
    names = policy_names()
    assert {"lru", "belady"} <= set(names)
    seen = []
    results = run_grid(small_trace, names, [0.05, 0.2], semantics=semantics)
    assert len(results) == 2 * len(names)
    for r in results:
        assert r.requests == 150 and r.block_accesses == small_trace.stream.size
        assert 0.0 <= miss(r) <= 1.0
        assert r.misses >= small_trace.unique_blocks  # compulsory misses at least
        seen.append(r.policy)
    assert set(seen) == set(names)
    table = render_table(results)
    assert table.row_count == len(names)
