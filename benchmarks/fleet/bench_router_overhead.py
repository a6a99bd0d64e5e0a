"""Router overhead: latency added per request by `ctxcache route` against calling the worker directly,
in the same run, for ~4k-token prompts (issue 27's goal: p99 added <= 2 ms).

    python benchmarks/fleet/bench_router_overhead.py [--requests 300] [--tokens 4096] [--old /work/main/src]
        [--also NAME=SRC ...] [--args NAME=ARGS ...]

The worker is a stub that answers at once (benchmarks/fleet/stub_worker.py), so what is left is the
router's own work: parse, tokenize with the real Gemma tokenizer and chat template, hash the block
keys, look them up, score, proxy. Direct and routed requests alternate, one at a time, each on a
fresh prompt (no tokenizer or key reuse). ``--old SRC`` adds a second router run from another
source tree (main's, before a change) as its own arm, in the same loop: each round sends one
prompt to the worker and to every router, the arm that goes first rotating; ``--also NAME=SRC``
adds more such arms, and ``--args NAME="--flag value"`` gives an arm's router more arguments
(``--also nocache=src --args "nocache=--piece-cache-tokens 0"``: this tree with an option off). Besides latencies,
each router's process CPU time per request (/proc). Prints one JSON line; writes
benchmarks/results/router_overhead.json and a plot of the added latency per arm (.png beside it).
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


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(c: httpx.Client, url: str, n: int) -> dict[str, float]:
    text = c.get(f"{url}/metrics").text
    tokens = sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith("ctxcache_router_prompt_tokens_total"))
    pre = {
        x.split()[0]: float(x.split()[-1])
        for x in text.splitlines()
        if x.startswith("ctxcache_router_overhead_seconds_")
    }
    return {"prompt_tokens_mean": round(tokens / n),
            # the router's work before it sends (parse, tokenize, keys, index, score), from its histogram;
            # the rest of the added time is the extra HTTP hop through the proxy
            "before_send_mean_ms": round(1e3 * pre["ctxcache_router_overhead_seconds_sum"]
                                         / max(1.0, pre["ctxcache_router_overhead_seconds_count"]), 3)}  # fmt: skip


def plot(arms: dict[str, list[float]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for name, xs in arms.items():
        ms = np.sort(np.array(xs) * 1e3)
        ax.plot(ms, np.arange(1, len(ms) + 1) / len(ms), label=name)
    ax.axvline(2.0, color="r", ls="--", lw=1, label="goal: p99 <= 2 ms")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("added latency per request, ms (routed - direct, same prompt)")
    ax.set_ylabel("fraction of requests")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def start_router(src: Path, worker: str, port: int, extra: list[str] | None = None) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-c",
        "from ctxcache.cli import main; main()",
        "route",
        "--worker",
        worker,
        "--port",
        str(port),
        *(extra or []),
    ]
    return subprocess.Popen(cmd, env={**os.environ, "PYTHONPATH": str(src)}, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--tokens", type=int, default=4096, help="prompt tokens (about)")
    ap.add_argument("--old", type=Path, default=None,
                    help="a baseline arm: a second router run from this src directory (e.g. /work/main/src)")  # fmt: skip
    ap.add_argument("--also", action="append", default=[], metavar="NAME=SRC", help="more arms, each a src directory")
    ap.add_argument("--args", action="append", default=[], metavar="NAME=ARGS", help="more arguments for an arm")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "router_overhead.json")
    args = ap.parse_args()
    wport = free_port()
    stub = subprocess.Popen([sys.executable, str(HERE / "stub_worker.py"), str(wport)],
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})  # fmt: skip
    worker = f"http://127.0.0.1:{wport}"
    srcs = {"new": ROOT / "src"} | ({"old": args.old} if args.old else {})
    srcs |= {name: Path(src) for name, _, src in (a.partition("=") for a in args.also)}
    ports = {name: free_port() for name in srcs}
    extra = {name: more.split() for name, _, more in (a.partition("=") for a in args.args)}
    routers = {name: start_router(src, worker, ports[name], extra.get(name)) for name, src in srcs.items()}
    urls = {name: f"http://127.0.0.1:{p}" for name, p in ports.items()}
    load0 = os.getloadavg()[0]
    try:
        wait(worker, stub)
        for name, proc in routers.items():
            wait(urls[name], proc)
        words = args.tokens // 6  # " w12345" is ~6 Gemma tokens
        direct: list[float] = []
        routed: dict[str, list[float]] = {name: [] for name in srcs}
        cpu0: dict[str, float] = {}
        with httpx.Client(timeout=60) as c:
            for i in range(-10, args.requests):  # 10 warm-up rounds
                if i == 0:
                    cpu0 = {name: cpu_s(p.pid) for name, p in routers.items()}
                body = json.dumps(prompt(i, words)).encode()
                order = [("direct", worker)] + [(n, urls[n]) for n in srcs]
                k = i % len(order)  # each arm goes first as often as the others
                for name, url in order[k:] + order[:k]:
                    t0 = time.perf_counter()
                    r = c.post(f"{url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
                    dt = time.perf_counter() - t0
                    assert r.status_code == 200, r.text
                    if i >= 0:
                        (direct if name == "direct" else routed[name]).append(dt)
            cpu = {name: cpu_s(p.pid) - cpu0[name] for name, p in routers.items()}
            scraped = {name: scrape(c, urls[name], args.requests + 10) for name in srcs}
        arms = {}
        for name in srcs:
            added = [r - d for r, d in zip(routed[name], direct)]
            arms[name] = {
                **({"src": str(srcs[name])} if name != "new" else {}),
                **({"args": extra[name]} if name in extra else {}),
                "routed_ms": {"p50": pct(routed[name], 50), "p99": pct(routed[name], 99)},
                "added_ms": {"p50": pct(added, 50), "p90": pct(added, 90), "p99": pct(added, 99)},
                "router_cpu_ms_per_request": round(cpu[name] / args.requests * 1e3, 3),
                **scraped[name],
            }
        new = arms["new"]
        out = {
            "bench": "router_overhead",
            "requests": args.requests,
            "prompt_tokens_mean": new["prompt_tokens_mean"],
            "direct_ms": {"p50": pct(direct, 50), "p99": pct(direct, 99)},
            "routed_ms": new["routed_ms"],
            "added_ms": new["added_ms"],
            "goal_p99_added_le_2ms": new["added_ms"]["p99"] <= 2.0,
            "before_send_mean_ms": new["before_send_mean_ms"],
            "router_cpu_ms_per_request": new["router_cpu_ms_per_request"],
            "arms": arms,
            "loadavg": round(os.getloadavg()[0], 2),
            "loadavg_start": round(load0, 2),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        plot({n: [r - d for r, d in zip(routed[n], direct)] for n in srcs}, args.out.with_suffix(".png"))
        print(json.dumps(out))
    finally:
        for p in (*routers.values(), stub):
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
