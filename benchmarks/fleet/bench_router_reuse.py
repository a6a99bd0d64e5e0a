"""Token reuse through the router on real workers: two `ctxcache serve` workers (the real model)
and `ctxcache route`, 8 chat sessions x 4 turns sharing 2 system prompts, three arms in one run:

* one worker: every request to worker 0 directly (all the reuse one cache can give);
* router: every request through `ctxcache route`;
* round-robin: requests alternate between the two workers directly.

Each arm runs under its own ``cache_salt``, so it starts from cold caches on the same workers.
Goal (issue 27): router reuse >= one worker's - 0.02, and round-robin's loss shown beside it.

    python benchmarks/fleet/bench_router_reuse.py        # 96 requests of the real model: ~1 h at load 18
    python benchmarks/fleet/bench_router_reuse.py --sessions 4 --turns 2

Prints one JSON line; writes benchmarks/results/router_reuse.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
FACTS = [
    "The library opens at nine and closes at six, except on Sundays when it is closed all day.",
    "The harbour master keeps a log of every ship that docks, and the log goes back ninety years.",
    "The bakery on Elm Street sells rye bread, and it is usually sold out before noon.",
    "The council meets on the first Monday of each month in the old town hall by the river.",
]
SYSTEMS = [
    "You are the town's help desk. Answer in one short sentence. Facts: " + " ".join(FACTS * 3),
    "You are a tour guide for visitors. Be brief and friendly. Notes: " + " ".join(reversed(FACTS * 3)),
]
QUESTIONS = ["When does the library open?", "What does the bakery sell?", "Where does the council meet?",
             "How old is the harbour log?"]  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-c", "from ctxcache.cli import main; main()", *args, "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{args[0]} exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    sys.exit(f"{args[0]} did not get ready")


def run_arm(name: str, urls: list[str], sessions: int, turns: int, client: httpx.Client) -> dict[str, object]:
    history = [[{"role": "system", "content": SYSTEMS[s % 2]}] for s in range(sessions)]
    prompt = cached = n = 0
    for t in range(turns):
        for s in range(sessions):
            msgs = history[s] + [{"role": "user", "content": f"(visitor {s}) {QUESTIONS[(s + t) % len(QUESTIONS)]}"}]
            url = urls[n % len(urls)]
            body = {"model": "gemma-3-270m", "messages": msgs, "max_tokens": 8, "temperature": 0,
                    "cache_salt": f"arm-{name}", "user": f"session-{s}"}  # fmt: skip
            r = client.post(f"{url}/v1/chat/completions", json=body)
            r.raise_for_status()
            out = r.json()
            prompt += out["usage"]["prompt_tokens"]
            cached += out["usage"]["prompt_tokens_details"]["cached_tokens"]
            history[s] = msgs + [{"role": "assistant", "content": out["choices"][0]["message"]["content"]}]
            n += 1
        print(f"{name}: turn {t + 1}/{turns} done, reuse so far {cached / prompt:.3f}", file=sys.stderr, flush=True)
    return {"requests": n, "prompt_tokens": prompt, "cached_tokens": cached, "reuse": round(cached / prompt, 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "router_reuse.json")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # so the finally below stops the fleet
    from ctxcache.integrations.model_store import resolve_model

    model = str(resolve_model(None, quiet=True))
    tmp = Path(tempfile.mkdtemp(prefix="router-reuse-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    procs = []
    try:
        workers = []
        for i in range(2):
            p, url = start(["serve", "--model", model], {**env, "CTXCACHE_HOME": str(tmp / f"h{i}")}, tmp / f"w{i}.log")
            procs.append(p)
            workers.append(url)
        p, router = start(
            ["route", "--model", model, "--worker", workers[0], "--worker", workers[1]], env, tmp / "r.log"
        )
        procs.append(p)
        with httpx.Client(timeout=600) as c:
            arms = {
                "one_worker": run_arm("one_worker", [workers[0]], args.sessions, args.turns, c),
                "router": run_arm("router", [router], args.sessions, args.turns, c),
                "round_robin": run_arm("round_robin", workers, args.sessions, args.turns, c),
            }
            state = c.get(f"{router}/router/state").json()
        out = {
            "bench": "router_reuse",
            "sessions": args.sessions,
            "turns": args.turns,
            "arms": arms,
            "router_requests_per_worker": [w["requests"] for w in state["workers"]],
            "goal_router_ge_one_worker_minus_0.02": arms["router"]["reuse"] >= arms["one_worker"]["reuse"] - 0.02,
            "round_robin_loss": round(arms["one_worker"]["reuse"] - arms["round_robin"]["reuse"], 4),
            "loadavg": round(os.getloadavg()[0], 2),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(json.dumps(out))
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=60)


if __name__ == "__main__":
    main()
