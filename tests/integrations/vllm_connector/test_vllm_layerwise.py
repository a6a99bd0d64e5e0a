"""Layer-wise transfer end to end with vLLM (CPU build, fp32, eager, greedy): `make test-vllm`.

Four engines, one at a time, each in its own process, on one RAM + disk cache directory:
A   no connector, no prefix caching: the reference outputs of P and Q;
W   whole-step mode, fresh cache: P cold (2,000 tokens, prefilled in 512-token chunks: stored whole-step);
L   layer-wise mode, a restart on W's disk tier: P (W's whole-step blocks loaded layer by layer), then Q
    cold (2,000 tokens, 4 chunks: stored layer by layer);
W2  whole-step mode, a restart: Q (L's layer-wise blocks loaded whole-step), then P.
TTFT with a cached prefix in both modes is recorded (JSON next to the logs, printed with -s).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm: run `make test-vllm`")

from .server_util import tokens as _tokens  # noqa: E402
from .test_vllm_e2e import P, run_engine  # noqa: E402

Q = [2, *_tokens(4, 1999)]  # 15 whole 128-token blocks + 80 tokens, like P
WHOLE = 1920  # the whole blocks short of the last token
LAYERS = 18  # Gemma 3 270M


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("vllm-layerwise")
    cfg = {"tiers": [{"kind": "memory", "capacity": "256MiB"}, {"kind": "disk", "capacity": "2GiB", "path": str(tmp / "disk")}]}  # fmt: skip
    req = lambda toks: {"tokens": toks, "max_tokens": 12}  # noqa: E731
    out: dict[str, Any] = {}
    out["A"] = run_engine(tmp, "A", [req(P), req(Q)], None)
    out["W"] = run_engine(tmp, "W", [req(P)], {"config": cfg})
    out["L"] = run_engine(tmp, "L", [req(P), req(Q)], {"config": cfg, "layerwise": True})
    out["W2"] = run_engine(tmp, "W2", [req(Q), req(P)], {"config": cfg})
    figures = {
        "ttft_cached_P_s": {"layerwise (L)": out["L"]["requests"][0]["ttft_s"], "whole-step (W2)": out["W2"]["requests"][1]["ttft_s"]},
        "ttft_cached_Q_s": {"whole-step (W2), L's blocks": out["W2"]["requests"][0]["ttft_s"]},
        "ttft_cold_s": {"P whole-step (W)": out["W"]["requests"][0]["ttft_s"], "Q layerwise (L)": out["L"]["requests"][1]["ttft_s"]},
        "cached": {k: [r["cached"] for r in out[k]["requests"]] for k in ("W", "L", "W2")},
        "L_connector": out["L"]["stats"]["connector"],
    }  # fmt: skip
    (tmp / "figures.json").write_text(json.dumps(figures, indent=1))
    print("layer-wise e2e figures:", json.dumps(figures))
    return out


def _conn(run: dict[str, Any]) -> dict[str, Any]:
    return dict(run["stats"]["connector"])


def test_layerwise_outputs_equal_whole_step_and_no_connector(runs: dict[str, Any]) -> None:
    a_p, a_q = (r["output"] for r in runs["A"]["requests"])
    assert runs["W"]["requests"][0]["output"] == a_p
    assert [r["output"] for r in runs["L"]["requests"]] == [a_p, a_q]
    assert [r["output"] for r in runs["W2"]["requests"]] == [a_q, a_p]


def test_a_restarted_layerwise_engine_loads_whole_step_blocks_layer_by_layer(runs: dict[str, Any]) -> None:
    assert runs["W"]["requests"][0]["cached"] == 0
    assert runs["L"]["requests"][0]["cached"] == WHOLE
    c = _conn(runs["L"])
    assert c["loaded_blocks"] == WHOLE // 128 and c["load_errors"] == 0
    # vLLM's CPU path called wait_for_layer_load once per layer in the loading step...
    assert c["layer_waits"] >= LAYERS
    # ...and save_kv_layer for every layer of every saving step: no layer was copied by the fallback
    assert c["layer_saves"] > 0 and c["layer_fallbacks"] == 0


def test_a_prompt_longer_than_a_step_is_stored_completely_layer_by_layer(runs: dict[str, Any]) -> None:
    c = _conn(runs["L"])
    assert c["saved_blocks"] == WHOLE // 128 and c["stored_blocks"] == WHOLE // 128 and c["saves_dropped"] == 0
    assert c["save_requests"] >= 4  # Q's 2,000 tokens in 512-token chunks: a save in each chunk's step
    # the whole-step engine after it loads all of them
    assert runs["W2"]["requests"][0]["cached"] == WHOLE
    assert runs["W2"]["requests"][1]["cached"] == WHOLE
    assert _conn(runs["W2"])["load_errors"] == 0
    assert _conn(runs["W"])["stored_blocks"] == WHOLE // 128  # P stored completely whole-step


def test_cached_prefix_ttft_in_both_modes(runs: dict[str, Any]) -> None:
    cold = runs["W"]["requests"][0]["ttft_s"]
    layer, whole = runs["L"]["requests"][0]["ttft_s"], runs["W2"]["requests"][1]["ttft_s"]
    assert layer < cold and whole < cold, (layer, whole, cold)
