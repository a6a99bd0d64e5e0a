"""Gemma 3 with vLLM's hybrid KV manager on (CtxCacheHybridConnector, SupportsHMA): vLLM CPU, fp32.

Four engines, one at a time, each in its own process (run.py), all on Gemma 3 270M (15 sliding-
window layers, window 512, in five KV-cache groups; 3 full-attention layers in one):
A  hybrid on, no connector, no prefix caching: the reference outputs;
B  hybrid on, the connector on a fresh RAM + disk cache: P (2,000 tokens, prefilled in 512-token
   chunks: longer than max_num_batched_tokens) and D + question 1 (D: a 1,500-token document);
C  hybrid on, a new engine on B's disk (a restart): P again (reused whole), D + question 2 (reused
   up to the last segment boundary inside D, 1,024 tokens);
O  CtxCacheConnector (no SupportsHMA: vLLM turns hybrid off, today's layout) on a fresh cache: B's
   two prompts, for the bytes per stored block of the same blocks.
The unit tests (test_groups.py) cover the window rule, the all-groups rule and a missing group's
block on the real group layout without vLLM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm: run `make test-vllm`")

from .server_util import tokens as _tokens  # noqa: E402
from .test_vllm_e2e import BLOCK, run_engine  # noqa: E402

P = [2, *_tokens(11, 1999)]  # 15 whole blocks + 80 tokens
D = [2, *_tokens(12, 1499)]  # 11 whole blocks + 92 tokens
Q1, Q2 = _tokens(13, 300), _tokens(14, 300)
MAX_TOKENS = 12
HYBRID = "CtxCacheHybridConnector"  # SupportsHMA (opt-in); "CtxCacheConnector" keeps vLLM's hybrid manager off


def _cfg(tmp: Path, name: str) -> dict[str, Any]:
    return {"config": {"tiers": [
        {"kind": "memory", "capacity": "512MiB"},
        {"kind": "disk", "capacity": "2GiB", "path": str(tmp / f"{name}-disk")}]}}  # fmt: skip


def _reqs(*prompts: list[int]) -> list[dict[str, Any]]:
    return [{"tokens": p, "max_tokens": MAX_TOKENS} for p in prompts]


def test_gemma3_hybrid_restart_reuse_and_bytes_per_block(tmp_path: Path) -> None:
    ref = run_engine(tmp_path, "A", _reqs(P, D + Q1, D + Q2), None)
    b = run_engine(tmp_path, "B", _reqs(P, D + Q1), _cfg(tmp_path, "hma"), HYBRID)
    c = run_engine(tmp_path, "C", _reqs(P, D + Q2), _cfg(tmp_path, "hma"), HYBRID)
    o = run_engine(tmp_path, "O", _reqs(P, D + Q1), _cfg(tmp_path, "off"))  # today's connector: vLLM turns hybrid off
    outs = [r["output"] for r in ref["requests"]]

    # B: nothing cached yet; every whole block of both prompts stored (P: 4 chunks of 512 tokens)
    assert [r["output"] for r in b["requests"]] == outs[:2]
    assert "|hma:g0=sw512x3,g1=sw512x3,g2=sw512x3,g3=sw512x3,g4=sw512x3,g5=fullx3|" in b["stats"]["layout"]
    bc = b["stats"]["connector"]
    assert bc["stored_blocks"] == 15 + (len(D) + len(Q1)) // BLOCK, bc
    assert bc["store_errors"] == 0 and bc["saves_dropped"] == 0

    # C (restart): P's 15 whole blocks loaded, D + Q2 up to D's last segment boundary (1,024 tokens)
    assert [r["output"] for r in c["requests"]] == [outs[0], outs[2]]
    assert c["requests"][0]["cached"] == 15 * BLOCK, c["requests"][0]
    assert c["requests"][1]["cached"] == 1024, c["requests"][1]
    cc = c["stats"]["connector"]
    assert cc["load_errors"] == 0 and cc["loaded_blocks"] >= 15, cc

    # bytes per stored block: hybrid on (sliding windows kept sparsely) vs off (every layer, every block)
    assert [r["output"] for r in o["requests"]] == outs[:2]
    assert "|hma:" not in o["stats"]["layout"]
    oc = o["stats"]["connector"]
    per_off = oc["saved_bytes"] / oc["saved_blocks"]
    per_on = bc["saved_bytes"] / bc["saved_blocks"]
    print(f"\nbytes per stored block: hybrid off {per_off:,.0f}, hybrid on {per_on:,.0f} "
          f"({per_on / per_off:.1%}); blocks off {oc['saved_blocks']}, on {bc['saved_blocks']}; "
          f"bytes off {oc['saved_bytes']:,}, on {bc['saved_bytes']:,}")  # fmt: skip
    assert oc["saved_blocks"] == bc["saved_blocks"] == 29
    layer_block = 2 * 256 * BLOCK * 4  # K and V, 1 KV head x 256, fp32
    assert per_off == 18 * layer_block
    # on: the full-attention group in all 29 blocks; the sliding-window groups in 8 of P's 15 blocks
    # (4-7: before the boundary at 1,024; 11-14: before P's resume point) and 8 of D + Q1's 14
    assert bc["saved_bytes"] == (29 * 3 + 16 * 15) * layer_block


def test_only_the_hybrid_connector_keeps_vllms_hybrid_manager() -> None:
    """vLLM decides from the class (KVConnectorFactory.supports_hma_config): opt-in by name."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import supports_hma

    from ctxcache.integrations.vllm import CtxCacheConnector, CtxCacheHybridConnector

    assert supports_hma(CtxCacheHybridConnector) and not supports_hma(CtxCacheConnector)


def test_layerwise_with_hybrid_groups_is_refused_at_startup(tmp_path: Path) -> None:
    """layerwise.py copies one group's block ids: with several groups it would copy the wrong
    blocks, so the connector refuses the pair before vLLM allocates anything."""
    from types import SimpleNamespace

    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    from ctxcache.errors import ConfigError
    from ctxcache.integrations.vllm import CtxCacheHybridConnector

    from .test_groups import VB, _kv_config

    def vllm_config(extra: dict[str, Any]) -> Any:
        tc = SimpleNamespace(kv_connector_extra_config=extra, engine_id="t", kv_load_failure_policy="recompute")
        return SimpleNamespace(
            kv_transfer_config=tc, cache_config=SimpleNamespace(block_size=VB),
            parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
            model_config=SimpleNamespace(model=str(tmp_path), revision=None, dtype="float32"),
        )  # fmt: skip

    extra = {"config": {"tiers": [{"kind": "memory", "capacity": "8MiB"}]}, "socket": str(tmp_path / "s.sock")}
    CtxCacheHybridConnector(vllm_config(extra), KVConnectorRole.WORKER, _kv_config())  # whole-step: fine
    with pytest.raises(ConfigError, match="'layerwise' supports one KV-cache group"):
        CtxCacheHybridConnector(vllm_config({**extra, "layerwise": True}), KVConnectorRole.WORKER, _kv_config())
