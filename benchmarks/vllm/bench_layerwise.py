"""TTFT with a cached prefix: the ctxcache connector's layer-wise vs whole-step transfer, in one run.

Run in vLLM's virtualenv: ``CTXCACHE_VLLM_MODEL=<model dir> .venv-vllm/bin/python
benchmarks/vllm/bench_layerwise.py [--rounds 8] [--prompt 2000] [--dtype float32]``.

Two engines live in this process at once (vLLM gives each its own engine-core and worker process):
one with ``kv_connector_extra_config {"layerwise": true}``, one in whole-step mode (the default),
each with its own 1 GiB RAM tier. vLLM's own prefix cache is off in both, so every request's prefix
comes from ctxcache. Each engine first serves every prompt cold (they are stored), then ROUNDS
rounds follow, alternating which engine goes first; in a round each engine serves every prompt
again: all whole 128-token blocks but the one holding the last token are loaded from ctxcache, the
rest is computed, one token is generated; then each engine serves COLD new prompts (the same ones in
both engines; each engine has its own cache, so they are uncached in both): a whole prefill whose
blocks are saved, layer by layer or whole-step. Both engines run the same model, the same prompts and
the same settings (fp32, eager, ``max_num_batched_tokens`` 2048, so the cached requests are one
step); the machine's load is shared between them by the alternation.

Prints one JSON line (also written to benchmarks/results/vllm_layerwise.json): TTFT per mode
(every sample, p50, mean, min), layer-wise p50 over whole-step p50, the cold TTFTs, whether the
generated tokens agree, and each engine's connector counters (time on the engine's thread for
loads and save copies, the layer-wise waits).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
RESULTS = ROOT / "benchmarks" / "results"
MODES = ("layerwise", "whole_step")
KEEP = (
    "load_requests", "loaded_blocks", "load_errors", "load_s", "load_max_s", "saved_blocks", "save_copy_s",
    "save_copy_max_s", "layer_waits", "layer_wait_s", "layer_wait_max_s", "layer_saves", "layer_copy_s",
    "layer_save_wait_s", "layer_fallbacks", "lookups", "lookup_s",
)  # fmt: skip


def engine(model: str, dtype: str, tmp: Path, mode: str) -> Any:
    from vllm import LLM

    extra: dict[str, Any] = {
        "config": {"tiers": [{"kind": "memory", "capacity": "1GiB"}]},
        "stats_path": str(tmp / f"{mode}-stats.json"),
        "socket": str(tmp / f"{mode}.sock"),
    }
    if mode == "layerwise":
        extra["layerwise"] = True
    return LLM(
        model=model, dtype=dtype, enforce_eager=True, max_model_len=4096, max_num_batched_tokens=2048,
        enable_prefix_caching=False, block_size=128, seed=0, disable_log_stats=False,
        kv_transfer_config={
            "kv_connector": "CtxCacheConnector", "kv_connector_module_path": "ctxcache.integrations.vllm",
            "kv_role": "kv_both", "kv_connector_extra_config": extra,
        },
    )  # fmt: skip


def one(llm: Any, tokens: list[int]) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    out = llm.generate([TokensPrompt(prompt_token_ids=tokens)], SamplingParams(temperature=0.0, max_tokens=1),
                       use_tqdm=False)[0]  # fmt: skip
    wall = time.perf_counter() - t0
    ttft = getattr(out.metrics, "first_token_latency", 0.0) if out.metrics is not None else 0.0
    return {"ttft_s": ttft or wall, "wall_s": wall, "cached": out.num_cached_tokens or 0,
            "token": list(out.outputs[0].token_ids)}  # fmt: skip


def summary(xs: list[float]) -> dict[str, Any]:
    return {"p50": statistics.median(xs), "mean": statistics.fmean(xs), "min": min(xs), "max": max(xs),
            "samples": [round(x, 4) for x in xs]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=2000, help="prompt tokens")
    ap.add_argument("--prompts", type=int, default=2, help="distinct prompts per round")
    ap.add_argument(
        "--cold", type=int, default=1, help="new (uncached) prompts per round: stores, layer-wise vs whole-step"
    )
    ap.add_argument("--first", choices=MODES, default="layerwise", help="the engine created first (placement)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default=str(RESULTS / "vllm_layerwise.json"))
    args = ap.parse_args()
    model = os.environ.get("CTXCACHE_VLLM_MODEL") or sys.exit("set CTXCACHE_VLLM_MODEL (a model directory)")
    from ctxcache.integrations.vllm.run import _final_stats, _shutdown
    from ctxcache.integrations.vllm.serve import vllm_env

    tmp = Path(tempfile.mkdtemp(prefix="ctxcache-bench-layerwise-"))
    os.environ.update(vllm_env(os.environ, VLLM_CPU_KVCACHE_SPACE="1"))
    os.environ.setdefault("VLLM_CACHE_ROOT", str(tmp / "vllm-cache"))
    os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "180")
    rng = random.Random(0)
    prompts = [[2, *(rng.randrange(1000, 20000) for _ in range(args.prompt - 1))] for _ in range(args.prompts)]
    t0 = time.perf_counter()
    created = (args.first, *(m for m in MODES if m != args.first))
    llms = {m: engine(model, args.dtype, tmp, m) for m in created}
    startup = time.perf_counter() - t0
    cold = {m: [one(llms[m], p) for p in prompts] for m in MODES}
    recs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    colds: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for rnd in range(args.rounds):
        order = MODES if rnd % 2 == 0 else MODES[::-1]
        fresh = [[2, *(rng.randrange(1000, 20000) for _ in range(args.prompt - 1))] for _ in range(args.cold)]
        for m in order:
            for p in prompts:
                recs[m].append(one(llms[m], p))
            for p in fresh:  # the same new prompt in both engines: each has its own cache
                colds[m].append(one(llms[m], p))
    for llm in llms.values():
        _shutdown(llm)
    stats = {m: _final_stats(tmp / f"{m}-stats.json") or {} for m in MODES}
    ttft = {m: summary([r["ttft_s"] for r in recs[m]]) for m in MODES}
    tokens = {m: [r["token"] for r in cold[m] + recs[m] + colds[m]] for m in MODES}
    cold_ttft = {m: summary([r["ttft_s"] for r in colds[m]]) for m in MODES} if args.cold else {}
    result = {
        "bench": "vllm-layerwise",
        "model": Path(model).name, "dtype": args.dtype, "prompt_tokens": args.prompt, "prompts": args.prompts,
        "rounds": args.rounds, "created_first": args.first, "startup_s": round(startup, 1),
        "cached_tokens": {m: sorted({r["cached"] for r in recs[m]}) for m in MODES},
        "ttft_cached_s": ttft,
        "layerwise_over_whole_step_p50": ttft["layerwise"]["p50"] / ttft["whole_step"]["p50"],
        "layerwise_over_whole_step_mean": ttft["layerwise"]["mean"] / ttft["whole_step"]["mean"],
        "ttft_first_cold_s": {m: [round(r["ttft_s"], 3) for r in cold[m]] for m in MODES},
        "ttft_cold_alternated_s": cold_ttft,
        "cold_layerwise_over_whole_step_p50": (
            cold_ttft["layerwise"]["p50"] / cold_ttft["whole_step"]["p50"] if cold_ttft else None
        ),
        "outputs_equal": tokens["layerwise"] == tokens["whole_step"],
        "connector": {m: {k: (stats[m].get("connector") or {}).get(k) for k in KEEP} for m in MODES},
        "loadavg": os.getloadavg(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # vLLM's leftover threads (see run.py)


if __name__ == "__main__":
    main()
