"""Layer-wise transfer (layerwise.py) on fake paged KV tensors: same blocks as whole-step mode, per-layer
waits, the copy running ahead of the forward pass, failures as recomputes, saves without hooks.

The connector calls, in vLLM's order per step: ``new_step`` (bind_connector_metadata), ``start_load``
(start_load_kv), per attention layer ``wait_layer`` then ``save_layer`` (wait_for_layer_load,
save_kv_layer), ``finish_save`` (wait_for_save), ``finish_load`` + ``take_errors``
(get_block_ids_with_load_errors). ``_step`` below plays that order.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from ctxcache import ContextCache
from ctxcache.integrations.vllm.layerwise import LayerPipeline
from ctxcache.integrations.vllm.plan import LoadSpec, Planner, SaveSpec
from ctxcache.integrations.vllm.worker import WorkerSide

NB, H, VB, D, L = 32, 2, 4, 6, 12  # vLLM blocks, kv heads, vLLM block size, 2*head_dim, layers
NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(L)]  # 10 and 11 sort before 2 as strings


def _kv(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn((NB, H, VB, D), generator=g) for n in NAMES}


def _worker(tmp_path: Path, name: str, kv: dict[str, torch.Tensor], disk: Path | None = None) -> WorkerSide:
    tiers: list[dict[str, Any]] = [{"kind": "memory", "capacity": "8MiB"}]
    if disk is not None:
        tiers = [{"kind": "disk", "capacity": "64MiB", "path": str(disk)}]
    cache = ContextCache.from_config({"block_size": 8, "tiers": tiers})
    w = WorkerSide(cache, VB, tmp_path / f"{name}.sock")
    w.register(kv, NB)
    return w


def _step(
    p: LayerPipeline,
    loads: list[LoadSpec] = (),  # type: ignore[assignment]
    saves: list[SaveSpec] = (),  # type: ignore[assignment]
    hooks: bool = True,
    on_layer: Any = None,
) -> set[int]:
    """One vLLM step through the pipeline, layers in forward order; returns the load errors."""
    p.new_step()
    p.start_load(list(loads))
    if hooks:
        for li, name in enumerate(NAMES):
            p.wait_layer(name)
            if on_layer is not None:
                on_layer(li, name)
            p.save_layer(name, list(saves))
    p.finish_save(list(saves))
    p.finish_load()
    return p.w.take_errors()


def _vblocks(kv: dict[str, torch.Tensor], ids: list[int]) -> list[torch.Tensor]:
    return [t[ids].clone() for t in kv.values()]


TOKENS = list(range(100, 133))  # 4 ctxcache blocks of 8 (8 vLLM blocks of 4) + 1 token
SRC_IDS = [3, 5, 7, 9, 11, 13, 15, 17]
DST_IDS = [0, 1, 2, 4, 6, 8, 10, 12]


def _stored(w: WorkerSide) -> list[list[torch.Tensor]]:
    m = w.cache.lookup(TOKENS[:32], "vllm")
    try:
        assert m.n_blocks == 4
        return [[torch.as_tensor(x).clone() for x in pl] for pl in m.payloads]
    finally:
        w.cache.release(m)


def _stored_then_piped(tmp_path: Path) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], Any, LayerPipeline]:
    """A worker that stored SRC_IDS' four blocks of ``src`` whole-step, then registered ``dst``
    (a new engine's KV), with a layer pipeline over ``dst``."""
    src, dst = _kv(0), _kv(1)
    w = _worker(tmp_path, "a", src)
    w.save([SaveSpec("r", "vllm", TOKENS[:32], 0, SRC_IDS)])
    w.flush()
    w.register(dst, NB)
    return src, dst, w, LayerPipeline(w, dst)


def test_layerwise_saves_the_same_blocks_as_whole_step(tmp_path: Path) -> None:
    kv = _kv(0)
    whole, layered = _worker(tmp_path, "a", kv), _worker(tmp_path, "b", kv)
    p = LayerPipeline(layered, kv)
    save = [SaveSpec("r", "vllm", TOKENS[:16], 0, SRC_IDS[:4]), SaveSpec("s", "vllm", TOKENS[:32], 2, SRC_IDS[4:])]
    whole.save(save)
    assert _step(p, saves=save) == set()
    whole.flush()
    layered.flush()
    a, b = _stored(whole), _stored(layered)
    for x, y in zip(a, b):
        assert len(x) == len(y) == L and all(torch.equal(u, v) for u, v in zip(x, y))
    # the stored keys are the same: the block chain's hashes of both caches agree
    assert whole.cache.stats()["blocks"] == layered.cache.stats()["blocks"] == 4
    assert layered.c["layer_fallbacks"] == 0 and layered.c["saved_blocks"] == 4
    p.close()
    whole.close()
    layered.close()


@pytest.mark.parametrize("save_mode", ["whole", "layerwise"])
def test_a_block_saved_in_one_mode_loads_in_the_other(tmp_path: Path, save_mode: str) -> None:
    src, dst = _kv(0), _kv(1)
    disk = tmp_path / "disk"
    w = _worker(tmp_path, "s", src, disk)
    save = [SaveSpec("r", "vllm", TOKENS[:32], 0, SRC_IDS)]
    if save_mode == "whole":
        w.save(save)
    else:
        p = LayerPipeline(w, src)
        assert _step(p, saves=save) == set()
        p.close()
    w.close()
    # a restart on the same disk tier, loading in the other mode
    w2 = _worker(tmp_path, "t", dst, disk)
    load = [LoadSpec("q", "vllm", TOKENS[:32], 1, DST_IDS[1:])]  # vLLM already holds the first vLLM block
    if save_mode == "whole":
        p2 = LayerPipeline(w2, dst)
        assert _step(p2, loads=load) == set()
        p2.close()
    else:
        w2.load(load)
        assert w2.take_errors() == set()
    for a, b in zip(_vblocks(src, SRC_IDS[1:]), _vblocks(dst, DST_IDS[1:])):
        assert torch.equal(a, b)
    assert w2.c["loaded_blocks"] == 7
    w2.close()


def test_each_layer_is_loaded_when_its_attention_runs_and_the_copy_runs_ahead(tmp_path: Path) -> None:
    src, dst, w, p = _stored_then_piped(tmp_path)
    assert [NAMES[i] for i in p.order] == NAMES  # forward order, not string order
    real = p._copy_layer

    def slow(li: int, idx: torch.Tensor, parts: Any) -> None:  # a copy that takes 5 ms, like a big layer
        time.sleep(0.005)
        real(li, idx, parts)

    p._copy_layer = slow  # type: ignore[method-assign]
    want = _vblocks(src, SRC_IDS)
    seen_ahead: list[bool] = []

    def attention(li: int, name: str) -> None:  # the layer "computes" for 20 ms; the next layer's copy goes on
        assert torch.equal(dst[name][DST_IDS], want[li])
        time.sleep(0.02)
        if li + 1 < L:
            seen_ahead.append(p._load is not None and p._load.done[li + 1].is_set())

    assert _step(p, loads=[LoadSpec("q", "vllm", TOKENS[:32], 0, DST_IDS)], on_layer=attention) == set()
    assert sum(seen_ahead) >= L - 2, seen_ahead  # layer i+1 was copied while layer i "computed"
    assert w.c["loaded_blocks"] == 8 and w.c["load_errors"] == 0
    p.close()
    w.close()


def test_a_failed_layer_copy_is_a_recompute_of_every_block_it_touched(tmp_path: Path) -> None:
    src, dst, w, p = _stored_then_piped(tmp_path)
    real = p._copy_layer

    def flaky(li: int, idx: torch.Tensor, parts: Any) -> None:
        if li == 5:
            raise RuntimeError("injected: copy of layer 5 failed")
        real(li, idx, parts)

    p._copy_layer = flaky  # type: ignore[method-assign]
    before = _vblocks(dst, DST_IDS)
    done = threading.Event()

    def run() -> None:
        errors.update(_step(p, loads=[LoadSpec("q", "vllm", TOKENS[:32], 0, DST_IDS)]))
        done.set()

    errors: set[int] = set()
    threading.Thread(target=run, daemon=True).start()
    assert done.wait(10), "a failed layer must not leave a later layer's wait hanging"
    # layers 0-4 hold loaded KV, 5-11 the old KV: every one of those blocks is reported, so vLLM
    # recomputes each of them (all layers) and never uses a block of mixed KV.
    assert errors == set(DST_IDS)
    now = _vblocks(dst, DST_IDS)
    assert all(torch.equal(now[li], before[li]) for li in range(5, L))
    assert w.c["load_errors"] == 8 and w.c["loaded_blocks"] == 0
    # the scheduler side rewinds its "stored" mark, so the recomputed blocks are stored again
    planner = Planner(8, VB, lambda *_: 32)
    req = type("R", (), {"request_id": "q", "all_token_ids": TOKENS, "prompt_token_ids": TOKENS})()
    assert planner.matched(req, 0) == 32
    planner.allocated(req, 32)
    plan = planner.step([("q", DST_IDS + [14], 0)], [], {"q": 1})
    assert plan.loads and not plan.saves
    planner.load_failed(errors)
    assert planner.reqs["q"].saved == 0
    # the next step works again
    p._copy_layer = real  # type: ignore[method-assign]
    w.save([SaveSpec("r", "vllm", TOKENS[:32], 0, SRC_IDS)])
    w.flush()
    assert _step(p, loads=[LoadSpec("q2", "vllm", TOKENS[:32], 0, DST_IDS)]) == set()
    assert all(torch.equal(a, b) for a, b in zip(_vblocks(dst, DST_IDS), _vblocks(src, SRC_IDS)))
    p.close()
    w.close()


def test_missing_blocks_are_errors_and_the_rest_loads(tmp_path: Path) -> None:
    src, dst = _kv(0), _kv(1)
    w = _worker(tmp_path, "a", src)
    w.save([SaveSpec("r", "vllm", TOKENS[:16], 0, SRC_IDS[:4])])  # 2 ctxcache blocks stored
    w.flush()
    w.register(dst, NB)
    p = LayerPipeline(w, dst)
    errors = _step(
        p, loads=[LoadSpec("q", "vllm", TOKENS[:32], 0, DST_IDS), LoadSpec("z", "other", TOKENS[:8], 0, [20, 21])]
    )
    assert errors == set(DST_IDS[4:]) | {20, 21}
    assert all(torch.equal(a, b) for a, b in zip(_vblocks(dst, DST_IDS[:4]), _vblocks(src, SRC_IDS[:4])))
    assert w.c["loaded_blocks"] == 4 and w.c["load_errors"] == 6
    assert len(w.stash) == 0
    p.close()
    w.close()


def test_saves_without_hooks_and_chunked_prefill_store_completely(tmp_path: Path) -> None:
    """No save_kv_layer call (another attention path): wait_for_save copies every layer itself. And a
    prompt longer than one step's tokens (4 chunks), planned by the Planner, is stored completely."""
    kv = _kv(0)
    w = _worker(tmp_path, "a", kv)
    p = LayerPipeline(w, kv)
    planner = Planner(8, VB, lambda *_: 0)
    req = type("R", (), {"request_id": "c", "all_token_ids": TOKENS, "prompt_token_ids": TOKENS})()
    planner.matched(req, 0)
    planner.allocated(req, 0)
    ids = SRC_IDS + [19]
    steps = [planner.step([("c", ids, 0)], [], {"c": 10})]
    for done in (10, 20, 30):
        steps.append(planner.step([], [("c", None, False, done)], {"c": min(10, 33 - done)}))
    for i, plan in enumerate(steps):
        _step(p, saves=plan.saves, hooks=i % 2 == 0)
    w.flush()
    assert w.cache.stats()["blocks"] == 4
    assert w.c["layer_fallbacks"] == 2 * L  # the two steps without hooks
    got = _stored(w)
    for b in range(4):
        for li, name in enumerate(NAMES):
            assert torch.equal(got[b][li], kv[name][SRC_IDS[2 * b : 2 * b + 2]])
    p.close()
    w.close()


def test_a_step_ends_with_every_layer_copied_even_without_waits(tmp_path: Path) -> None:
    """vLLM asks for the load errors at the end of every step: by then every layer is copied and the
    pinned blocks are released, whether or not a wait_for_layer_load came for each layer."""
    src, dst, w, p = _stored_then_piped(tmp_path)
    real = p._copy_layer

    def slow(li: int, idx: torch.Tensor, parts: Any) -> None:
        time.sleep(0.005)
        real(li, idx, parts)

    p._copy_layer = slow  # type: ignore[method-assign]
    assert _step(p, loads=[LoadSpec("q", "vllm", TOKENS[:32], 0, DST_IDS)], hooks=False) == set()
    assert all(torch.equal(a, b) for a, b in zip(_vblocks(dst, DST_IDS), _vblocks(src, SRC_IDS)))
    assert w.c["loaded_blocks"] == 8 and p._load is None
    p.close()
    w.close()


@pytest.mark.parametrize(
    ("shape", "dtype"), [((2, NB, VB, H, D), torch.float32), ((NB, H, VB, D), torch.bfloat16)], ids=["axis1", "bf16"]
)
def test_other_layouts_and_dtypes_round_trip_like_whole_step(
    tmp_path: Path, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    """The CUDA flash-attention layout (block axis 1) and bfloat16 KV: layer-wise saves equal
    whole-step's, and layer-wise loads put back the exact bytes."""
    g = torch.Generator().manual_seed(3)
    src = {n: torch.randn(shape, generator=g).to(dtype) for n in NAMES}
    dst = {n: torch.zeros(shape, dtype=dtype) for n in NAMES}
    whole, layered = _worker(tmp_path, "a", src), _worker(tmp_path, "b", src)
    p = LayerPipeline(layered, src)
    save = [SaveSpec("r", "vllm", TOKENS[:32], 0, SRC_IDS)]
    whole.save(save)
    assert _step(p, saves=save) == set()
    whole.flush()
    layered.flush()
    for x, y in zip(_stored(whole), _stored(layered)):
        assert all(u.dtype == v.dtype and torch.equal(u, v) for u, v in zip(x, y))
    p.close()
    layered.register(dst, NB)
    p = LayerPipeline(layered, dst)
    assert _step(p, loads=[LoadSpec("q", "vllm", TOKENS[:32], 0, DST_IDS)]) == set()
    axis = 0 if shape[0] == NB else 1
    for n in NAMES:
        assert torch.equal(
            dst[n].index_select(axis, torch.tensor(DST_IDS)), src[n].index_select(axis, torch.tensor(SRC_IDS))
        )
    p.close()
    whole.close()
    layered.close()


def test_a_failed_layer_save_is_copied_again_or_not_stored(tmp_path: Path) -> None:
    """A save copy that raises on the copy thread is redone in wait_for_save; one that fails there
    too leaves its blocks unstored (counted as dropped), never stored with a layer missing."""
    kv = _kv(0)
    w = _worker(tmp_path, "a", kv)
    p = LayerPipeline(w, kv)
    real = p._save_layer
    fails = {"n": 1}

    def flaky(sv: Any, li: int) -> None:
        if li == 3 and fails["n"] > 0:
            fails["n"] -= 1
            raise RuntimeError("injected: save copy of layer 3 failed")
        real(sv, li)

    p._save_layer = flaky  # type: ignore[method-assign]
    save = [SaveSpec("r", "vllm", TOKENS[:32], 0, SRC_IDS)]
    assert _step(p, saves=save) == set()
    w.flush()
    assert w.c["layer_fallbacks"] == 1 and w.cache.stats()["blocks"] == 4
    for b, blk in enumerate(_stored(w)):
        assert all(torch.equal(blk[li], kv[n][SRC_IDS[2 * b : 2 * b + 2]]) for li, n in enumerate(NAMES))
    # now layer 3 fails on the thread and again in the fallback, for blocks 2-3 only (a second spec)
    w2 = _worker(tmp_path, "b", kv)
    p2 = LayerPipeline(w2, kv)
    real2 = p2._save_layer

    def broken(sv: Any, li: int) -> None:
        real2(sv, li)
        if li == 3:
            for b in range(1, len(sv.parts)):
                sv.parts[b][li] = None
            raise RuntimeError("injected: layer 3 of the second block on")

    p2._save_layer = broken  # type: ignore[method-assign]
    assert _step(p2, saves=[SaveSpec("r", "vllm", TOKENS[:32], 0, SRC_IDS)]) == set()
    w2.flush()
    assert w2.cache.stats()["blocks"] == 1 and w2.c["saves_dropped"] == 3
    m = w2.cache.lookup(TOKENS[:32], "vllm")
    assert m.n_blocks == 1 and len(m.payloads[0]) == L
    w2.cache.release(m)
    for x in (p, p2):
        x.close()
    w.close()
    w2.close()
