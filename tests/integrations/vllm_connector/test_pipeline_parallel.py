"""Pipeline parallelism with the in-process rank harness (test_tensor_parallel.py's ``Ranks``):
each pipeline stage holds its slice of the layers, each TP rank of a stage its heads; every rank is
a worker side with its own namespace, socket and disk directory, and the scheduler's all-ranks
lookup makes a block a hit only when every stage's every shard holds it. vLLM's own run of
``--pipeline-parallel-size 2`` on this CPU is in test_vllm_pp.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from ctxcache.errors import ConfigError
from ctxcache.integrations.vllm.ranks import check_world, rank_model

from .test_tensor_parallel import DST_IDS, SRC_IDS, TOKENS, Ranks
from .tp_rank import full_kv


@pytest.mark.parametrize("world,pp", [(2, 2), (4, 2)], ids=["pp2", "pp2xtp2"])
def test_each_stage_loads_its_own_layers(tmp_path: Path, world: int, pp: int) -> None:
    ranks = Ranks(tmp_path, full_kv(0), world=world, pp=pp)
    try:
        assert ranks.request("a", SRC_IDS)[0] == 0
        hit, plan = ranks.request("b", DST_IDS)
        assert hit == 32 and [ld.block_ids for ld in plan.loads] == [DST_IDS[:8]]
        for r in range(world):
            assert ranks.workers[r].take_errors() == set()
            loaded, stored = ranks.blocks(r, DST_IDS[:8]), ranks.blocks(r, SRC_IDS[:8])
            assert all(torch.equal(a, b) for a, b in zip(loaded, stored))
        layers = [set(ranks.kv[r]) for r in range(world)]
        assert layers[0].isdisjoint(layers[-1])  # the stages hold different layers
        models = [w.cache.model for w in ranks.workers]
        want = ["|pp0/2", "|pp1/2"] if world == 2 else ["|pp0/2|tp0/2", "|pp0/2|tp1/2", "|pp1/2|tp0/2", "|pp1/2|tp1/2"]
        assert [m[m.index("|pp") :] for m in models] == want
        for r in range(world):
            ranks.workers[r].cache.flush()
            assert len(list((tmp_path / "disk" / f"r{r}of{world}").rglob("*.blk"))) == 4
    finally:
        ranks.close()


def test_one_stages_failed_write_is_a_miss_for_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = Ranks(tmp_path, full_kv(0), world=2, pp=2)
    try:

        def disk_full(*a: Any, **k: Any) -> Any:
            raise OSError("no space left on device")

        monkeypatch.setattr(ranks.workers[1].cache, "store", disk_full)  # the second stage's layers
        ranks.request("a", SRC_IDS)
        assert ranks.workers[1].c["store_errors"] == 1
        assert ranks.lookup.clients[0].lookup("probe", "vllm", TOKENS[:32]) == 32  # stage 0 holds all four
        before = ranks.blocks(0, DST_IDS)
        hit, plan = ranks.request("b", DST_IDS)
        assert hit == 0 and plan.loads == [] and "b" in plan.drop
        assert all(torch.equal(a, b) for a, b in zip(before, ranks.blocks(0, DST_IDS)))  # stage 0 loaded nothing
    finally:
        ranks.close()


def test_stage_namespaces_and_worlds() -> None:
    assert rank_model("m", 1, 2) == "m|tp1/2"  # tensor parallelism alone keeps its names
    assert rank_model("m", 1, 2, pp=2) == "m|pp1/2"
    assert rank_model("m", 5, 8, pp=2) == "m|pp1/2|tp1/4"
    names = {rank_model("m", r, 4, pp) for pp in (1, 2, 4) for r in range(4)}
    assert len(names) == 12  # no rank of one world answers for another's
    with pytest.raises(ConfigError, match="pipeline stages of equal size"):
        rank_model("m", 0, 3, pp=2)
    with pytest.raises(ConfigError, match="pipeline_parallel_size must be >= 1"):
        check_world(1, 0)
