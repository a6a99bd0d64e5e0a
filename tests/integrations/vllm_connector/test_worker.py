"""The worker side on fake paged KV tensors: save, load, block-size ratio, every failure path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from ctxcache import ContextCache
from ctxcache.errors import ConfigError
from ctxcache.integrations.vllm.kv import KVLayout
from ctxcache.integrations.vllm.plan import LoadSpec, SaveSpec
from ctxcache.integrations.vllm.worker import WorkerSide

NB, H, VB, D, L = 16, 2, 4, 6, 3  # vLLM blocks, kv heads, vLLM block size, 2*head_dim, layers


def _kv(seed: int, shape: tuple[int, ...] = (NB, H, VB, D), dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {f"layers.{i}.attn": torch.randn(shape, generator=g).to(dtype) for i in range(L)}


def _worker(tmp_path: Path, tiers: list[dict[str, Any]] | None = None, cc_block: int = 8) -> WorkerSide:
    tiers = tiers or [{"kind": "memory", "capacity": "8MiB"}]
    cache = ContextCache.from_config({"block_size": cc_block, "tiers": tiers})
    return WorkerSide(cache, VB, tmp_path / "w.sock", tmp_path / "stats.json")


def _blocks(kv: dict[str, Any], ids: list[int]) -> list[torch.Tensor]:
    return [t[ids] for t in kv.values()]


def test_save_then_load_into_other_blocks(tmp_path: Path) -> None:
    src, dst = _kv(0), _kv(1)
    w = _worker(tmp_path)
    w.register(src, NB)
    tokens = list(range(100, 125))  # 3 ctxcache blocks of 8 (6 vLLM blocks) + 1 token
    w.save([SaveSpec("a", "vllm", tokens[:24], 0, [3, 5, 7, 9, 11, 13])])
    w.flush()
    assert w.cache.stats()["blocks"] == 3
    w.register(dst, NB)
    # vLLM already holds the first vLLM block; load the other five into fresh blocks.
    w.load([LoadSpec("b", "vllm", tokens[:24], 1, [0, 1, 2, 4, 6])])
    assert w.take_errors() == set()
    for a, b in zip(_blocks(src, [5, 7, 9, 11, 13]), _blocks(dst, [0, 1, 2, 4, 6])):
        assert torch.equal(a, b)
    assert w.c["loaded_blocks"] == 5
    w.close()
    final = json.loads((tmp_path / "stats.json").read_text())
    assert final["closed"] and final["connector"]["loaded_blocks"] == 5 and "lookup_s" in final["connector"]


def test_missing_and_misshapen_blocks_are_reported_not_raised(tmp_path: Path) -> None:
    kv = _kv(0)
    w = _worker(tmp_path)
    w.register(kv, NB)
    tokens = list(range(17))
    w.save([SaveSpec("a", "vllm", tokens[:8], 0, [1, 2])])
    w.flush()
    w.cache.store(tokens[:16], [[torch.zeros(3)] * L], "vllm", first_block=1)  # wrong shape for block 1
    before = kv["layers.0.attn"].clone()
    w.load([LoadSpec("b", "vllm", tokens[:16], 0, [5, 6, 7, 8])])
    w.load([LoadSpec("c", "other-tenant", tokens[:16], 0, [10, 11])])  # nothing stored there
    assert w.take_errors() == {7, 8, 10, 11}
    assert w.take_errors() == set()
    assert torch.equal(kv["layers.0.attn"][[5, 6]], before[[1, 2]])
    assert torch.equal(kv["layers.0.attn"][[7, 8]], before[[7, 8]])  # left for vLLM to recompute
    assert w.c["load_errors"] == 4
    w.close()


def test_corrupt_disk_block_is_a_counted_miss(tmp_path: Path) -> None:
    tiers = [{"kind": "disk", "capacity": "8MiB", "path": str(tmp_path / "d")}]
    kv = _kv(0)
    w = _worker(tmp_path, tiers)
    w.register(kv, NB)
    tokens = list(range(24))
    w.save([SaveSpec("a", "vllm", tokens, 0, list(range(6)))])
    w.close()
    files = sorted((tmp_path / "d").rglob("*.blk"))
    assert len(files) == 3
    for f in files:  # flip a payload byte in every block: headers stay valid
        data = bytearray(f.read_bytes())
        data[-1] ^= 0xFF
        f.write_bytes(bytes(data))
    w2 = _worker(tmp_path, tiers)
    w2.register(_kv(1), NB)
    assert w2.stash.lookup("r", "vllm", tokens + [0]) == 0
    w2.load([LoadSpec("r", "vllm", tokens, 0, [0, 1, 2, 3, 4, 5])])
    assert w2.take_errors() == {0, 1, 2, 3, 4, 5}
    assert w2.cache.stats()["corrupt"] >= 1
    w2.close()


def test_a_dead_redis_tier_degrades_to_ram(tmp_path: Path) -> None:
    from tests.conftest import free_port

    tiers = [
        {"kind": "memory", "capacity": "8MiB"},
        {"kind": "redis", "capacity": "8MiB", "url": f"redis://127.0.0.1:{free_port()}/0", "timeout": 0.05},
    ]
    kv, dst = _kv(0), _kv(1)
    w = _worker(tmp_path, tiers)
    w.register(kv, NB)
    tokens = list(range(16))
    w.save([SaveSpec("a", "vllm", tokens, 0, [0, 1, 2, 3])])
    w.flush()
    w.register(dst, NB)
    w.load([LoadSpec("b", "vllm", tokens, 0, [4, 5, 6, 7])])
    assert w.take_errors() == set() and w.c["store_errors"] == 0
    assert torch.equal(dst["layers.2.attn"][[4, 5, 6, 7]], kv["layers.2.attn"][[0, 1, 2, 3]])
    w.close()


def test_bf16_round_trips_through_a_serializing_tier(tmp_path: Path) -> None:
    tiers = [{"kind": "disk", "capacity": "8MiB", "path": str(tmp_path / "d")}]
    src, dst = _kv(0, dtype=torch.bfloat16), _kv(1, dtype=torch.bfloat16)
    w = _worker(tmp_path, tiers)
    w.register(src, NB)
    w.save([SaveSpec("a", "vllm", list(range(8)), 0, [2, 3])])
    w.flush()
    w.cache.flush()
    w.register(dst, NB)
    w.load([LoadSpec("b", "vllm", list(range(8)), 0, [8, 9])])
    assert w.take_errors() == set()
    assert torch.equal(dst["layers.1.attn"][[8, 9]], src["layers.1.attn"][[2, 3]])
    w.close()


def test_layout_with_block_axis_one_and_refusals() -> None:
    kv = {"l0": torch.randn(2, NB, VB, H, 3), "l1": torch.randn(2, NB, VB, H, 3)}  # CUDA flash-attn style
    lay = KVLayout(kv, NB, VB)
    assert lay.axes == [1, 1]
    (block,) = lay.gather([4, 9], 2)
    dst = {k: torch.zeros_like(v) for k, v in kv.items()}
    lay2 = KVLayout(dst, NB, VB)
    lay2.scatter([0, 1], [(block, 0), (block, 1)])
    assert torch.equal(dst["l1"][:, [0, 1]], kv["l1"][:, [4, 9]])
    shared = torch.randn(NB, 2)
    assert len(KVLayout({"a": shared, "b": shared}, NB, VB).layers) == 1
    with pytest.raises(ConfigError, match="layout is not supported"):
        KVLayout({"x": torch.randn(3, 5, 7)}, NB, VB)
    with pytest.raises(ConfigError, match="no KV cache tensors"):
        KVLayout({}, NB, VB)


def test_ratio_is_checked_at_startup(tmp_path: Path) -> None:
    cache = ContextCache.from_config({"block_size": 6, "tiers": [{"kind": "memory", "capacity": "1MiB"}]})
    with pytest.raises(ConfigError, match="not a multiple"):
        WorkerSide(cache, VB, tmp_path / "x.sock")
