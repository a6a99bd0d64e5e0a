"""Router overhead: latency added per request by `ctxcache route` against calling the worker directly,
in the same run, for ~4k-token prompts (issue 27's goal: p99 added <= 2 ms).

    python benchmarks/fleet/bench_router_overhead.py [--requests 300] [--tokens 4096]

The worker is a stub that answers at once (benchmarks/fleet/stub_worker.py), so what is left is the
router's own work: parse, tokenize with the real Gemma tokenizer and chat template, hash the block
keys, look them up, score, proxy. Direct and routed requests alternate, one at a time, each on a
fresh prompt (no tokenizer or key reuse). Prints one JSON line; writes
benchmarks/results/router_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(url: str, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{url}: the process exited ({proc.returncode})")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    sys.exit(f"{url} did not get ready")


def prompt(i: int, words: int) -> dict[str, object]:
    rng = np.random.default_rng(i + 1000)  # warm-up pairs have negative i
    text = " ".join(f"w{x}" for x in rng.integers(0, 100_000, words))
    return {"model": "stub", "max_tokens": 1, "messages": [{"role": "system", "content": "Be brief."},
                                                           {"role": "user", "content": text}]}  # fmt: skip


def pct(xs: list[float], q: float) -> float:
    return round(float(np.percentile(np.array(xs) * 1e3, q)), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=4096, help="prompt tokens (about)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "router_overhead.json")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    wport, rport = free_port(), free_port()
    stub = subprocess.Popen([sys.executable, str(HERE / "stub_worker.py"), str(wport)], env=env)
    worker = f"http://127.0.0.1:{wport}"
    cmd = [
        sys.executable,
        "-c",
        "from ctxcache.cli import main; main()",
        "route",
        "--worker",
        worker,
        "--port",
        str(rport),
    ]
    router = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    try:
        wait(worker, stub)
        wait(f"http://127.0.0.1:{rport}", router)
        words = args.tokens // 6  # " w12345" is ~6 Gemma tokens
        direct, routed = [], []
        with httpx.Client(timeout=60) as c:
            for i in range(-10, args.requests):  # 10 warm-up pairs
                body = json.dumps(prompt(i, words)).encode()
                for url, out in ((worker, direct), (f"http://127.0.0.1:{rport}", routed)):
                    t0 = time.perf_counter()
                    r = c.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
                    dt = time.perf_counter() - t0
                    assert r.status_code == 200, r.text
                    if i >= 0:
                        out.append(dt)
            metrics = c.get(f"http://127.0.0.1:{rport}/metrics").text
        tokens = sum(
            float(x.split()[-1]) for x in metrics.splitlines() if x.startswith("ctxcache_router_prompt_tokens_total")
        )
        added = [r - d for r, d in zip(routed, direct)]
        pre = {
            x.split()[0]: float(x.split()[-1])
            for x in metrics.splitlines()
            if x.startswith("ctxcache_router_overhead_seconds_")
        }
        out = {
            "bench": "router_overhead",
            "requests": args.requests,
            "prompt_tokens_mean": round(tokens / (args.requests + 10)),
            "direct_ms": {"p50": pct(direct, 50), "p99": pct(direct, 99)},
            "routed_ms": {"p50": pct(routed, 50), "p99": pct(routed, 99)},
            "added_ms": {"p50": pct(added, 50), "p90": pct(added, 90), "p99": pct(added, 99)},
            "goal_p99_added_le_2ms": pct(added, 99) <= 2.0,
            # The router's work before it sends (parse, tokenize, keys, index, score), from its histogram;
            # the rest of the added time is the extra HTTP hop through the proxy.
            "before_send_mean_ms": round(
                1e3
                * pre["ctxcache_router_overhead_seconds_sum"]
                / max(1.0, pre["ctxcache_router_overhead_seconds_count"]),
                3,
            ),
            "loadavg": round(os.getloadavg()[0], 2),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out))
    finally:
        for p in (router, stub):
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
