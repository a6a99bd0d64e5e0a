"""Hybrid KV groups (groups.py) without vLLM, on the group layout vLLM 0.32.0 computes for Gemma 3
270M with the hybrid manager on (read from its KVCacheConfig on this CPU): six groups of three
layers, five sliding-window (window 512) and one full-attention, block size 128, and one KV tensor
per layer position shared by a layer of every group (layers 0..5 share one, 6..11 the next, ...), so
a block id names one group's block in a shared pool. Scaled down here: block 4 tokens, window 9
(a resume point needs the last 2 blocks), segment 16 tokens (4 blocks).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from ctxcache.config import load_config
from ctxcache.errors import ConfigError
from ctxcache.integrations.vllm.groups import NULL_BLOCK, HybridLayout, groups_of, zip_groups
from ctxcache.integrations.vllm.plan import LoadSpec, Planner, SaveSpec
from ctxcache.integrations.vllm.worker import WorkerSide, open_worker

VB, NB, D, WINDOW, SEGMENT = 4, 256, 6, 9, 16
FULL_GROUP = 5  # as in Gemma 3: layers 5, 11, 17 are full attention


class SlidingWindowSpec(SimpleNamespace):  # vLLM's spec classes, by name (groups.py reads the name)
    pass


class FullAttentionSpec(SimpleNamespace):
    pass


class MambaSpec(SimpleNamespace):
    pass


def _kv_config(block: int = VB) -> Any:
    groups = []
    for g in range(6):
        names = [f"model.layers.{g + 6 * i}.self_attn.attn" for i in range(3)]
        spec = (
            FullAttentionSpec(block_size=block)
            if g == FULL_GROUP
            else SlidingWindowSpec(block_size=block, sliding_window=WINDOW, extra_retained_tokens=0)
        )
        groups.append(SimpleNamespace(layer_names=names, kv_cache_spec=spec))
    return SimpleNamespace(kv_cache_groups=groups, num_blocks=NB)


def _kv_caches(seed: int) -> dict[str, torch.Tensor]:
    """Three shared tensors, each viewed by one layer of every group (vLLM's hybrid allocation)."""
    g = torch.Generator().manual_seed(seed)
    shared = [torch.randn(NB, 1, VB, D, generator=g) for _ in range(3)]
    return {f"model.layers.{g + 6 * i}.self_attn.attn": shared[i] for g in range(6) for i in range(3)}


def _worker(tmp_path: Path, kv: dict[str, torch.Tensor], name: str = "w", **cfg: Any) -> WorkerSide:
    config = load_config({"block_size": VB, "tiers": [{"kind": "memory", "capacity": "64MiB"}], **cfg})
    groups = groups_of(_kv_config(), VB)
    return open_worker(config, "fp", kv, NB, VB, tmp_path / f"{name}.sock", groups=groups, hma_segment=SEGMENT)


def _ids(n: int, start: int) -> list[tuple[int, ...]]:
    """n block positions, each a tuple of six distinct pool ids (one per group), none the null block."""
    return [tuple(start + 6 * i + g for g in range(6)) for i in range(n)]


def _tokens(n: int, seed: int = 0) -> list[int]:
    return [1000 * seed + 7 * i % 997 + 3 for i in range(n)]


def test_groups_of_reads_the_layout_and_refuses_what_it_cannot_store() -> None:
    groups = groups_of(_kv_config(), VB)
    assert [g.kind for g in groups] == ["sw9"] * 5 + ["full"]
    assert groups[0].layer_names == ("model.layers.0.self_attn.attn", "model.layers.6.self_attn.attn",
                                     "model.layers.12.self_attn.attn")  # fmt: skip
    with pytest.raises(ConfigError, match="block size"):
        groups_of(_kv_config(block=8), VB)
    bad = _kv_config()
    bad.kv_cache_groups[0].kv_cache_spec = MambaSpec(block_size=VB)
    with pytest.raises(ConfigError, match="MambaSpec"):
        groups_of(bad, VB)
    assert zip_groups([[1, 2], [3, 4], [5]]) == [(1, 3, 5), (2, 4, NULL_BLOCK)]


def test_window_rule_keeps_sliding_blocks_only_where_a_request_can_resume(tmp_path: Path) -> None:
    layout = HybridLayout(_kv_caches(0), groups_of(_kv_config(), VB), NB, VB, VB, SEGMENT)
    # prompt of 41 tokens: the same prompt resumes at block 10; segment boundaries every 4 blocks
    kept = [b for b in range(12) if layout.keep(0, b, 41)]
    assert kept == [2, 3, 6, 7, 8, 9, 10, 11]  # 2 before each boundary (4, 8), 2 before 10, generated
    assert all(layout.keep(FULL_GROUP, b, 41) for b in range(12))
    no_segments = HybridLayout(_kv_caches(0), groups_of(_kv_config(), VB), NB, VB, VB, 0)
    assert [b for b in range(12) if no_segments.keep(0, b, 41)] == [8, 9, 10, 11]


def _save_prompt(w: WorkerSide, tokens: list[int], ids: list[tuple[int, ...]], **kw: Any) -> None:
    n = len(tokens) // VB
    w.save([SaveSpec("a", "vllm", tokens[: n * VB], 0, ids[:n], len(tokens))])
    w.flush()


def test_store_restart_load_per_group(tmp_path: Path) -> None:
    src = _kv_caches(1)
    tokens = _tokens(41)  # 10 whole blocks + 1
    ids = _ids(10, 1)
    w = _worker(tmp_path, src)
    _save_prompt(w, tokens, ids)
    assert w.c["stored_blocks"] == 10
    # bytes: full group every block (10 x 3 layers), sliding groups only blocks 2,3,6,7,8,9 (6 x 15)
    per_layer_block = VB * D * 4
    assert w.c["saved_bytes"] == (10 * 3 + 6 * 15) * per_layer_block
    cache = w.cache

    # a new engine (its own tensors), the same cache: vLLM asks for the 10 blocks, sliding groups
    # only for the last two (nulls before: out of the window), as its allocation does
    dst = _kv_caches(2)
    w2 = WorkerSide(cache, VB, tmp_path / "w2.sock")
    w2.layout = HybridLayout(dst, groups_of(_kv_config(), VB), NB, VB, VB, SEGMENT)
    w2.stash.usable = w2.layout.usable_tokens
    assert w2.stash.lookup("b", "vllm", tokens[:40]) == 40
    new = _ids(10, 30)
    want = [tuple(x if g == FULL_GROUP or i >= 8 else NULL_BLOCK for g, x in enumerate(p)) for i, p in enumerate(new)]
    w2.load([LoadSpec("b", "vllm", tokens[:40], 0, want)])
    assert w2.take_errors() == set()
    names = list(src)
    for g in range(6):
        for layer in (f"model.layers.{g + 6 * i}.self_attn.attn" for i in range(3)):
            assert layer in names
            for i in range(10):
                if g != FULL_GROUP and i < 8:
                    continue
                assert torch.equal(dst[layer][new[i][g]], src[layer][ids[i][g]]), (g, layer, i)
    w.close()
    w2.server.close()


def test_shared_prefix_is_reused_up_to_the_last_segment_boundary(tmp_path: Path) -> None:
    w = _worker(tmp_path, _kv_caches(3))
    doc = _tokens(30, 1)  # 7 whole blocks + 2
    _save_prompt(w, doc + _tokens(11, 2), _ids(10, 1))
    # another question on the same document: 7 blocks match, but the window before block 7 (5, 6)
    # was not kept; the last resume point with every group's window is the boundary at block 4
    other = doc + _tokens(11, 3)
    assert w.cache.lookup(other[:40], "vllm").n_blocks == 7
    assert w.stash.lookup("q", "vllm", other[:40]) == 4 * VB
    w.close()


def test_a_missing_group_block_is_a_miss_never_a_partial_load(tmp_path: Path) -> None:
    w = _worker(tmp_path, _kv_caches(4))
    tokens = _tokens(41, 4)
    ids = _ids(10, 1)
    # sliding group 2's block 9 was already dropped by vLLM (the null block): stored without its layers
    ids[9] = tuple(NULL_BLOCK if g == 2 else x for g, x in enumerate(ids[9]))
    _save_prompt(w, tokens, ids)
    assert w.c["stored_blocks"] == 10  # the full-attention group's blocks are all there
    # a resume at 10 or 9 blocks needs group 2's block 9 / its block 8..9? (9: blocks 7, 8) -> 9 is fine
    assert w.stash.lookup("r", "vllm", tokens[:40]) == 9 * VB
    # vLLM asking for a group's block that was not stored gets a load error for that block, not stale KV
    w.stash.drop(["r"])
    want = _ids(10, 100)
    w.load([LoadSpec("r2", "vllm", tokens[:40], 0, want)])
    errors = w.take_errors()
    assert errors == {want[i][g] for i in range(10) for g in range(5) if i not in (2, 3, 6, 7, 8, 9)} | {want[9][2]}
    w.close()


def test_hybrid_blocks_never_answer_a_single_group_lookup(tmp_path: Path) -> None:
    from ctxcache.integrations.vllm.kv import KVLayout

    hybrid = _worker(tmp_path, _kv_caches(5), "h")
    tokens = _tokens(41, 5)
    _save_prompt(hybrid, tokens, _ids(10, 1))
    flat = {f"model.layers.{i}.self_attn.attn": torch.zeros(NB, 1, VB, D) for i in range(18)}
    assert hybrid.layout is not None and hybrid.layout.fingerprint() != KVLayout(flat, NB, VB).fingerprint()
    assert "|hma:g0=sw9x3" in hybrid.cache.model
    hybrid.close()


def test_a_prompt_longer_than_the_batch_stores_completely(tmp_path: Path) -> None:
    """Chunked prefill with hybrid ids: every block saved, chunk by chunk, sliding groups included."""
    w = _worker(tmp_path, _kv_caches(6))
    tokens = _tokens(41, 6)
    req = SimpleNamespace(request_id="a", all_token_ids=tokens, prompt_token_ids=tokens, cache_salt=None)
    p = Planner(VB, VB, lambda *a: 0)
    assert p.matched(req, 0) == 0
    p.allocated(req, 0)
    ids = _ids(11, 1)
    per_group = [[x[g] for x in ids] for g in range(6)]
    chunk = 12  # max_num_batched_tokens: 3 blocks a step
    plans = [p.step([("a", zip_groups([ids_g[:3] for ids_g in per_group]), 0)], [], {"a": chunk})]
    for step in range(1, 4):
        new = zip_groups([ids_g[3 * step : 3 * step + 3] for ids_g in per_group])
        plans.append(p.step([], [("a", new, False, step * chunk)], {"a": min(chunk, 41 - step * chunk)}))
    for plan in plans:
        w.save(plan.saves)
    w.flush()
    assert [len(s.block_ids) for plan in plans for s in plan.saves] == [3, 3, 3, 1]
    assert w.c["stored_blocks"] == 10
    assert w.stash.lookup("b", "vllm", tokens[:40]) == 40
    w.close()
