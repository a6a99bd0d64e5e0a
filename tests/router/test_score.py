"""The routing rule: longest prefix by tier, load, the balance guard, speculative entries, affinity, salts."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ctxcache.events import BlockStored, EventBatch, WorkerStarted
from ctxcache.keys import BlockHasher, Namespace
from ctxcache.router.index import BlockIndex, WorkerPrefix
from ctxcache.router.score import Load, ScoreConfig, Scorer, Speculative, merged

BS = 32
CFG = ScoreConfig(block_size=BS)


def pfx(blocks: int = 0, fast: int | None = None, slow: int = 0, shared: int = 0) -> WorkerPrefix:
    fast = blocks - slow - shared if fast is None else fast
    return WorkerPrefix(blocks, fast, slow, shared)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_longest_cached_prefix_wins_at_equal_load():
    d = Scorer(CFG).choose(4096, {"a": pfx(10), "b": pfx(40), "c": pfx(0)}, {})
    assert (d.worker, d.reason, d.predicted_cached_tokens) == ("b", "cache", 40 * BS)


def test_ram_blocks_weigh_more_than_disk_and_shared_blocks_count_for_all():
    s = Scorer(CFG)
    assert s.choose(4096, {"a": pfx(40, slow=40), "b": pfx(40)}, {}).worker == "b"
    # A shared-store prefix is a hit on every attached worker: the load then decides.
    d = s.choose(4096, {"a": pfx(40, shared=40), "b": pfx(40, shared=40)}, {"a": Load(2000)})
    assert (d.worker, d.predicted_cached_tokens) == ("b", 40 * BS)
    # Disk beats shared, a longer disk prefix beats a shorter RAM one.
    assert s.choose(4096, {"a": pfx(40, slow=40), "b": pfx(40, shared=40)}, {}).worker == "a"
    assert s.choose(4096, {"a": pfx(60, slow=60), "b": pfx(30)}, {}).worker == "a"


def test_load_outweighs_a_small_cached_prefix():
    s = Scorer(CFG)
    prefixes = {"a": pfx(32), "b": pfx(0)}  # a: 1024 tokens cached, worth 2048 (twice: see score.py)
    assert s.choose(4096, prefixes, {"a": Load(prefill_tokens=1900)}).worker == "a"
    d = s.choose(4096, prefixes, {"a": Load(prefill_tokens=2200)})
    assert (d.worker, d.reason) == ("b", "load")
    assert s.choose(4096, prefixes, {"a": Load(streaming=40)}).worker == "b"  # decode load counts too


def test_the_balance_guard_stops_a_hot_prefix_piling_on_one_worker():
    s = Scorer(CFG)
    hot = {"a": pfx(120), "b": pfx(0)}  # a holds the whole 4k prompt
    assert s.choose(4096, hot, {"a": Load(3000)}).worker == "a"  # cache still pays
    d = s.choose(4096, hot, {"a": Load(20_000), "b": Load(100)})
    assert (d.worker, d.reason) == ("b", "balance")
    # Over the absolute threshold but not the relative one: the cost rule decides, not the guard.
    d = s.choose(100_000, {"a": pfx(3000), "b": pfx(0)}, {"a": Load(100_000), "b": Load(80_000)})
    assert (d.worker, d.reason) == ("a", "cache")


def test_speculative_entries_keep_a_burst_together_until_they_expire():
    clock = Clock()
    spec = Speculative(ttl_s=5, clock=clock)
    s = Scorer(CFG)
    keys = [os.urandom(16) for _ in range(8)]
    first = s.choose(300, merged(None, spec.prefix(keys), ["a", "b", "c"]), {"a": Load(50), "c": Load(50)})
    assert first.worker == "b" and first.predicted_cached_tokens == 0
    spec.add(keys, first.worker)
    loads = {"b": Load(300)}  # b is busy with the first request: the burst still follows it
    d = s.choose(300, merged(None, spec.prefix(keys), ["a", "b", "c"]), loads)
    assert (d.worker, d.predicted_cached_tokens) == ("b", 8 * BS)
    assert spec.prefix(keys[:4] + [os.urandom(16)] + keys[5:]) == {"b": 4}
    clock.t = 6
    assert spec.prefix(keys) == {}
    assert s.choose(300, merged(None, spec.prefix(keys), ["a", "b", "c"]), loads).worker == "a"


def test_speculative_entries_are_bounded_and_forgotten_with_their_worker():
    spec = Speculative(capacity=100)
    keys = [os.urandom(16) for _ in range(150)]
    spec.add(keys, "a")
    assert len(spec) == 100 and spec.prefix(keys) == {}  # the oldest (the chain's start) went first
    spec.add(keys[:10], "b")
    spec.forget("b")
    assert spec.prefix(keys[:10]) == {}


def test_speculative_blocks_lengthen_the_index_prefix_as_ram():
    m = merged(None, {"a": 5}, ["a", "b"])
    assert m["a"] == pfx(5) and m["b"] == pfx(0)
    idx = BlockIndex()
    keys = [os.urandom(16) for _ in range(6)]
    idx.apply(EventBatch("a", "1-a", 1, (WorkerStarted(("memory", "disk")), BlockStored(tuple(keys[:3]), "disk"))))
    got = merged(idx.prefix(keys), {"a": 5}, ["a"])["a"]
    assert (got.blocks, got.fast, got.slow) == (5, 2, 3)


def test_session_affinity_breaks_ties_only():
    s = Scorer(CFG)
    even = {"a": pfx(4), "b": pfx(4)}
    assert s.choose(1000, even, {}, session="s1").worker == "a"
    s.choose(1000, {"a": pfx(0), "b": pfx(4)}, {}, session="s1")  # s1 moved to b for its cache
    d = s.choose(1000, even, {}, session="s1")
    assert (d.worker, d.reason) == ("b", "affinity")
    assert s.choose(1000, {"a": pfx(20), "b": pfx(4)}, {}, session="s1").worker == "a"  # cache beats affinity


def test_new_prefixes_at_equal_load_spread_over_idle_workers():
    # Low load: every worker idle, no cache anywhere. By name alone each new prefix went to "a"
    # and the others got nothing (the chat fleet simulation's max/min was infinite).
    s = Scorer(CFG)
    cold = {w: pfx(0) for w in "abcd"}
    assert sorted(s.choose(4096, cold, {}).worker for _ in range(8)) == list("aabbccdd")
    # Only a tie-break: a cached prefix or a lower load still wins over fewer requests routed.
    assert s.choose(4096, {**cold, "d": pfx(8)}, {}).worker == "d"
    assert s.choose(4096, cold, {w: Load(100) for w in "abc"}).worker == "d"


def test_no_worker_is_an_error_and_one_is_taken():
    with pytest.raises(ValueError):
        Scorer(CFG).choose(10, {}, {})
    assert Scorer(CFG).choose(10, {"x": pfx(0)}, {"x": Load(10**9)}).reason == "only"


def test_the_last_prompt_token_is_never_predicted_cached():
    # 64 tokens: the worker looks up 63, so only block 0 can be a hit.
    assert Scorer(CFG).choose(64, {"a": pfx(2)}, {}).predicted_cached_tokens == 32
    assert Scorer(CFG).choose(65, {"a": pfx(2)}, {}).predicted_cached_tokens == 64


@pytest.mark.parametrize("other", [Namespace("tenant-b"), Namespace("tenant-a", salt=b"/salted")])
def test_a_request_never_scores_another_namespaces_blocks(other):
    hasher = BlockHasher(BS)
    tokens = np.arange(BS * 8, dtype=np.int32)
    mine = hasher.keys(tokens, Namespace("tenant-a"))
    idx = BlockIndex()
    idx.apply(EventBatch("a", "1-a", 1, (WorkerStarted(("memory",)), BlockStored(tuple(mine), "memory"))))
    spec = Speculative()
    spec.add(mine, "b")
    assert idx.prefix(mine).workers["a"].blocks == 8 and spec.prefix(mine) == {"b": 8}
    theirs = hasher.keys(tokens, other)  # the same tokens under another tenant or salt
    assert idx.prefix(theirs).workers["a"].blocks == 0 and spec.prefix(theirs) == {}
    d = Scorer(CFG).choose(len(tokens), merged(idx.prefix(theirs), spec.prefix(theirs), ["a", "b"]), {})
    assert d.predicted_cached_tokens == 0
