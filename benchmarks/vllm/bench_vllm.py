"""vLLM multi-session chat: APC alone vs vLLM's offloading connectors vs ctxcache vs LMCache.

Run in vLLM's virtualenv (`make bench-vllm`). Each configuration gets its own engine (one at a
time: 4.4-5.7 GB each), serves the same workload, then a fresh engine on the same configuration
replays every session's last prompt: the cached tokens after that restart show what survives.

Workload (scaled down for a shared 2-core CPU; the scale is printed with the results): SESSIONS
chat sessions, each a unique DOC-token system prompt + document, then TURNS-1 follow-ups of USER
tokens, OUT generated tokens per turn, served round robin (turn 1 of every session, then turn 2,
...). vLLM's own KV space is NUM_BLOCKS x 128 tokens in every configuration (3,072 tokens at 24),
well below the sessions' total, so its prefix cache (APC) alone must evict between a session's
turns (on CPU, VLLM_CPU_KVCACHE_SPACE overrides a byte budget, so the space is given in blocks). The hybrid KV manager is off in every configuration (ctxcache's connector and
vLLM's offloading connectors need it off; with it on, APC alone would keep only the sliding-window
layers' last 512 tokens and hold more sessions in the same bytes). Prompts are token ids (random
ids, fixed seed); bf16, eager, greedy. Every engine reserves one core for vLLM's scheduler
(VLLM_CPU_NUM_OF_RESERVED_CPU=1, vLLM's own choice without a connector; with any connector it
would reserve both of this machine's cores, see integrations/vllm/serve.py).

Prints one JSON line; writes benchmarks/results/vllm.json and vllm.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
LMCACHE_PY = os.environ.get("LMCACHE_PYTHON")  # a python with lmcache==0.5.6 next to vLLM
# or: a `pip install --no-deps --target DIR lmcache==0.5.6 aiofile caio` directory, put in front of
# vLLM's own packages for the LMCache configuration only (a throwaway install, vLLM's venv untouched)
LMCACHE_SITE = os.environ.get("LMCACHE_SITE")
# "(Worker pid=1) ERROR 12-01 11:11:57 [file.py:12] " before a traceback line
_HEADER = re.compile(r"^(?:\([^)]*\)\s*)?(?:(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \S+ \S+ \[[^\]]*\]\s*)?")
_EXC = re.compile(r"^((?:[A-Za-z_][\w.]*\.)?[A-Za-z_]*(?:Error|Exception)): (.+)$")


def workload(sessions: int, turns: int, doc: int, user: int, seed: int = 0) -> list[list[list[int]]]:
    rng = random.Random(seed)
    ids = lambda n: [rng.randrange(1000, 30000) for _ in range(n)]  # noqa: E731
    return [[[2, *ids(doc - 1)]] + [ids(user) for _ in range(turns - 1)] for _ in range(sessions)]


def configs(tmp: Path) -> dict[str, dict[str, Any] | None]:
    cc = "ctxcache.integrations.vllm"
    ram = {"tiers": [{"kind": "memory", "capacity": "2GiB"}]}
    disk = {"tiers": [{"kind": "memory", "capacity": "64MiB"}, {"kind": "disk", "capacity": "4GiB", "path": str(tmp / "cc-disk")}]}  # fmt: skip
    both = {"kv_role": "kv_both"}
    return {
        "apc": None,
        "vllm-offloading": {
            **both,
            "kv_connector": "OffloadingConnector",
            "kv_connector_extra_config": {"cpu_bytes_to_use": 2 << 30},
        },  # fmt: skip
        "vllm-offloading+fs": {  # its CPU tier plus a file-system tier: the one that could survive a restart
            **both,
            "kv_connector": "OffloadingConnector",
            "kv_connector_extra_config": {
                "spec_name": "TieringOffloadingSpec",
                "cpu_bytes_to_use": 2 << 30,
                "secondary_tiers": [{"type": "fs", "root_dir": str(tmp / "vllm-fs")}],
            },
        },  # fmt: skip
        "vllm-simple-cpu-offload": {
            **both,
            "kv_connector": "SimpleCPUOffloadConnector",
            "kv_connector_extra_config": {"cpu_bytes_to_use": 2 << 30},
        },  # fmt: skip
        "ctxcache-ram": {
            **both,
            "kv_connector": "CtxCacheConnector",
            "kv_connector_module_path": cc,
            "kv_connector_extra_config": {"config": ram},
        },  # fmt: skip
        "ctxcache-ram+disk": {
            **both,
            "kv_connector": "CtxCacheConnector",
            "kv_connector_module_path": cc,
            "kv_connector_extra_config": {"config": disk},
        },  # fmt: skip
        "lmcache": {**both, "kv_connector": "LMCacheConnectorV1"},
    }


def wait_for_memory(gib: float = 6.0, timeout: float = 900.0) -> None:
    """The machine is shared: start an engine (4.4-5.7 GB) only when it fits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable")) / 2**20
        if avail >= gib:
            return
        time.sleep(5)


def root_cause(log: str) -> dict[str, Any]:
    """The exceptions a failed engine printed (worker/engine-core prefixes stripped), first = deepest."""
    chain: list[str] = []
    for line in log.splitlines():
        m = _EXC.match(_HEADER.sub("", line.strip()))
        if m and m.group(0) not in chain:
            chain.append(m.group(0)[:400])
    if not chain:
        tail = [ln for ln in log.splitlines() if ln.strip()][-3:]
        return {"error": " | ".join(tail)[-400:] or "no output"}
    return {"error": chain[0], "error_chain": chain[:8]}


def run_engine(
    tmp: Path, name: str, job: dict[str, Any], python: str = sys.executable, site: str | None = None
) -> dict[str, Any]:
    path, out, log = tmp / f"{name}.json", tmp / f"{name}-out.json", tmp / f"{name}.log"
    path.write_text(json.dumps(job))
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp / "vllm-cache"), "VLLM_CPU_KVCACHE_SPACE": "1"}
    env["PYTHONPATH"] = os.pathsep.join([*([site] if site else []), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.update({"LMCACHE_CHUNK_SIZE": "256", "LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": "2"})
    wait_for_memory()
    with open(log, "w") as f:
        rc = subprocess.run(
            [python, "-m", "ctxcache.integrations.vllm.run", str(path), str(out)], env=env, stdout=f,
            stderr=subprocess.STDOUT, timeout=3600,
        ).returncode  # fmt: skip
    text = log.read_text(errors="replace")
    if rc != 0:
        return {**root_cause(text), "exit_code": rc}
    result = dict(json.loads(out.read_text()))
    logged = root_cause(text).get("error_chain")
    if logged:  # an engine can serve while its connector failed (LMCache falls back to recomputing)
        result["logged_errors"] = logged
    return result


def summarize(run: dict[str, Any], replay: dict[str, Any]) -> dict[str, Any]:
    recs = run["sessions"]
    ttft = sorted(r["ttft_s"] for r in recs)
    later = [r for r in recs if r["turn"] > 0]
    out = {
        "requests": len(recs),
        "ttft_p50_s": statistics.median(ttft),
        "ttft_p95_s": ttft[min(len(ttft) - 1, int(0.95 * len(ttft)))],
        "ttft_p50_later_turns_s": statistics.median(r["ttft_s"] for r in later) if later else None,
        "token_reuse": sum(r["cached"] for r in recs) / sum(r["prompt_tokens"] for r in recs),
        "throughput_rps": len(recs) / run["sessions_wall_s"],
        "startup_s": run["startup_s"],
        # where the wall time went: prefill up to the first token, the rest of each request
        # (decode, finishing), and between requests (the driver loop)
        "ttft_sum_s": sum(ttft),
        "after_first_token_sum_s": sum(r["wall_s"] - r["ttft_s"] for r in recs),
        "between_requests_s": run["sessions_wall_s"] - sum(r["wall_s"] for r in recs),
        "per_request": [
            [r["session"], r["turn"], r["prompt_tokens"], r["cached"], round(r["ttft_s"], 4), round(r["wall_s"], 4)]
            for r in recs
        ],  # fmt: skip
    }
    if run.get("logged_errors"):
        out["logged_errors"] = run["logged_errors"]
    if "error" in replay:
        out["restart_error"] = replay["error"]
    else:
        reqs = replay["requests"]
        out["restart_cached_tokens"] = sum(r["cached"] for r in reqs)
        out["restart_reuse"] = out["restart_cached_tokens"] / sum(r["prompt_tokens"] for r in reqs)
    conn = (run.get("stats") or {}).get("connector")
    if conn:
        keys = ("lookups", "lookup_s", "lookup_max_s", "loaded_blocks", "stored_blocks", "load_s", "load_max_s", "save_copy_s", "save_copy_max_s", "store_s", "load_errors", "saves_dropped")  # fmt: skip
        out["connector"] = {k: conn[k] for k in keys if k in conn}
    return out


def add_ratios(results: dict[str, Any], base: str = "apc") -> None:
    """Each configuration's TTFT p50 and reuse next to vLLM's prefix cache alone, from the same run."""
    b = results.get(base, {})
    if "ttft_p50_s" not in b:
        return
    for r in results.values():
        if "ttft_p50_s" in r:
            r["ttft_p50_vs_apc"] = r["ttft_p50_s"] / b["ttft_p50_s"]
            r["reuse_minus_apc"] = r["token_reuse"] - b["token_reuse"]


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = {k: v for k, v in results.items() if "ttft_p50_s" in v}
    # a configuration that served while its connector had failed is labelled so
    names = [f"{k}\n(connector failed)" if v.get("logged_errors") else k for k, v in ok.items()]
    vals = list(ok.values())
    fig, axes = plt.subplots(1, 4, figsize=(16, 4.4))
    bars = axes[0].bar(names, [v["ttft_p50_s"] for v in vals], label="p50")
    axes[0].bar_label(bars, labels=[f"{v.get('ttft_p50_vs_apc', 1):.2f}x" for v in vals], fontsize=8)
    axes[0].scatter(names, [v["ttft_p95_s"] for v in vals], color="black", marker="_", s=400, label="p95")
    axes[0].set_ylabel("TTFT (s); label: p50 / APC's")
    axes[0].legend()
    panels = [("token_reuse", "prompt tokens reused (fraction)", "tab:blue"),
              ("throughput_rps", "requests/s (one session at a time)", "tab:orange"),
              ("restart_reuse", "reused after an engine restart", "tab:green")]  # fmt: skip
    for ax, (key, label, color) in zip(axes[1:], panels):
        ax.bar(names, [v.get(key, 0.0) for v in vals], color=color)
        ax.set_ylabel(label)
    for ax in axes:
        ax.tick_params(axis="x", rotation=35, labelsize=7)
    failed = [k for k, v in results.items() if "error" in v]
    if failed:
        fig.text(0.01, 0.01, "did not start on this CPU: " + ", ".join(failed) + " (errors in vllm.json)", fontsize=8)
    fig.suptitle("vLLM CPU, multi-session chat (see docs/vllm.md for the scale)")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--doc", type=int, default=1024)
    ap.add_argument("--user", type=int, default=128)
    ap.add_argument("--out-tokens", type=int, default=8)
    ap.add_argument("--num-blocks", type=int, default=24, help="vLLM's own KV space in 128-token blocks")
    ap.add_argument("--only", default="", help="comma-separated configuration names, run in that order")
    args = ap.parse_args()
    from rich.progress import Progress

    model = os.environ.get("CTXCACHE_VLLM_MODEL") or sys.exit("set CTXCACHE_VLLM_MODEL (make bench-vllm does)")
    sessions = workload(args.sessions, args.turns, args.doc, args.user)
    scale = {k: getattr(args, k) for k in ("sessions", "turns", "doc", "user", "out_tokens", "num_blocks")}
    base = {"model": model, "dtype": "bfloat16", "max_model_len": 2048, "max_num_batched_tokens": 2048,
            "num_blocks": args.num_blocks, "disable_hma": True, "max_tokens": args.out_tokens}  # fmt: skip
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-vllm-") as d, Progress() as bar:
        tmp = Path(d)
        every = configs(tmp)
        todo = {k: every[k] for k in args.only.split(",")} if args.only else every
        task = bar.add_task("vLLM configurations", total=len(todo))
        for name, ktc in todo.items():
            bar.update(task, description=f"{name}")
            lm = name == "lmcache"
            python = (LMCACHE_PY or sys.executable) if lm else sys.executable
            site = LMCACHE_SITE if lm else None
            if lm and not (LMCACHE_PY or LMCACHE_SITE):
                results[name] = {"error": "not run: set LMCACHE_PYTHON or LMCACHE_SITE (lmcache==0.5.6 lives apart)"}
                bar.advance(task)
                continue
            job = {**base, "kv_transfer_config": ktc, "sessions": sessions}
            if ktc and ktc["kv_connector"] == "CtxCacheConnector":
                job["stats_path"] = str(tmp / f"{name}-stats.json")
                ktc["kv_connector_extra_config"]["stats_path"] = job["stats_path"]
            t0 = time.perf_counter()
            run = run_engine(tmp, name, job, python, site)
            if "error" in run:
                results[name] = run
            else:
                replay_job = {**base, "kv_transfer_config": ktc, "max_tokens": 1,
                              "requests": [{"tokens": p, "max_tokens": 1} for p in run["final_prompts"]]}  # fmt: skip
                replay = run_engine(tmp, f"{name}-restart", replay_job, python, site)
                results[name] = summarize(run, replay)
            results[name]["bench_s"] = time.perf_counter() - t0
            bar.advance(task)
            write(scale, results, partial=len(results) < len(todo))  # a run cut short keeps its figures
    record = write(scale, results, partial=False)
    plot(results, RESULTS / "vllm.png")
    print(json.dumps(record))


def write(scale: dict[str, Any], results: dict[str, Any], partial: bool) -> dict[str, Any]:
    add_ratios(results)
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"benchmark": "vllm_chat", "scale": scale, "partial": partial, "results": results}
    (RESULTS / "vllm.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    main()
