"""Memory under sustained load: the RSS of a real `ctxcache serve` process while clients chat.

A server process (the real model, a RAM tier of --ram over a disk tier in a temporary directory)
gets --clients concurrent multi-turn chats on loopback for --minutes. Conversations share a few
system prompts and grow until they near the context limit, then start over, so the RAM tier fills,
evicts and spills the whole time. The server's RSS is sampled every few seconds; the claim is that
after warm-up it stays within --bound x (model weights + configured RAM tiers).

    python benchmarks/soak.py                       # 30 min, 4 clients, 512 MiB RAM tier
    python benchmarks/soak.py --minutes 3 --no-tune  # without the allocator settings (a baseline)

Prints one JSON line; writes benchmarks/results/soak.json and soak.png (RSS over time).
Not in CI: it runs for half an hour.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

RESULTS = Path(__file__).resolve().parent / "results"
SRC = Path(__file__).resolve().parents[1] / "src"
err = Console(stderr=True)
_WORDS = [
    "harbour",
    "tide",
    "bridge",
    "river",
    "council",
    "library",
    "engineer",
    "ferry",
    "lighthouse",
    "winter",
    "supplies",
    "station",
    "train",
    "museum",
    "baker",
    "parcel",
    "mayor",
    "school",
    "storm",
    "seawall",
    "market",
    "lantern",
    "archive",
    "garden",
    "clock",
    "tower",
]


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n)) + "."


def _client(url: str, model: str, seed: int, stop: threading.Event, counts: dict[str, int]) -> None:
    rng = random.Random(seed)
    systems = [
        f"You are assistant {i}. " + " ".join(_sentence(random.Random(i), 12) for _ in range(25)) for i in range(4)
    ]
    with httpx.Client(base_url=url, timeout=600) as c:
        while not stop.is_set():
            msgs: list[dict[str, str]] = [{"role": "system", "content": rng.choice(systems)}]
            for _turn in range(rng.randint(3, 8)):
                if stop.is_set():
                    return
                msgs.append({"role": "user", "content": " ".join(_sentence(rng, 15) for _ in range(rng.randint(2, 8)))})
                body = {"model": model, "max_tokens": rng.choice([8, 16, 32]), "messages": msgs, "temperature": 0.7}
                try:
                    r = c.post("/v1/chat/completions", json=body)
                except httpx.HTTPError:
                    counts["errors"] += 1
                    continue
                if r.status_code != 200:
                    counts[f"http_{r.status_code}"] = counts.get(f"http_{r.status_code}", 0) + 1
                    break
                counts["requests"] += 1
                counts["cached_tokens"] += r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
                msgs.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})


def _start(args: argparse.Namespace, tmp: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    from ctxcache.integrations.model_store import resolve_model

    model_dir = resolve_model(None, quiet=True)
    cfg = tmp / "soak.toml"
    cfg.write_text(
        f'[server]\nmax_queue = 64\n[cache]\nblock_size = 32\n[[cache.tiers]]\nkind = "memory"\ncapacity = "{args.ram}"\n'
        f'[[cache.tiers]]\nkind = "disk"\ncapacity = "2GiB"\npath = "{tmp / "kv"}"\n'
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(SRC), "CTXCACHE_HOME": str(tmp)}
    if args.no_tune:
        env["CTXCACHE_MALLOC_TUNING"] = "0"
    log = (tmp / "serve.log").open("wb")
    cmd = [sys.executable, "-c", "from ctxcache.cli import main; main()", "serve", "--model", str(model_dir)]
    proc = subprocess.Popen([*cmd, "--port", str(port), "--config", str(cfg)], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {(tmp / 'serve.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url, model_dir
        except httpx.HTTPError:
            time.sleep(1)
    proc.kill()
    raise SystemExit("the server did not start")


def _plot(samples: list[tuple[float, int]], bound: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([t / 60 for t, _ in samples], [r / 2**30 for _, r in samples], label="server RSS")
    ax.axhline(bound / 2**30, color="red", linestyle="--", label="bound")
    ax.set_xlabel("minutes")
    ax.set_ylabel("GiB")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--ram", default="512MiB", help="RAM tier capacity")
    ap.add_argument("--bound", type=float, default=1.3)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--no-tune", action="store_true", help="run without the server's allocator settings")
    ap.add_argument("--out", default="soak")
    args = ap.parse_args()
    from ctxcache.config import parse_size

    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ctxcache-soak-") as d:
        tmp = Path(d)
        proc, url, model_dir = _start(args, tmp)
        weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
        bound = int(args.bound * (weights + parse_size(args.ram)))
        model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
        stop, counts = threading.Event(), {"requests": 0, "errors": 0, "cached_tokens": 0}
        threads = [
            threading.Thread(target=_client, args=(url, model, i, stop, counts), daemon=True)
            for i in range(args.clients)
        ]
        samples: list[tuple[float, int]] = []
        t0 = time.monotonic()
        for t in threads:
            t.start()
        total = args.minutes * 60
        with Progress(
            TextColumn("soak"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
        ) as bar:
            task = bar.add_task("", total=total)
            while (now := time.monotonic() - t0) < total and proc.poll() is None:
                samples.append((now, _rss(proc.pid)))
                bar.update(
                    task, completed=now, description=f"RSS {samples[-1][1] / 2**30:.2f} GiB, {counts['requests']} req"
                )
                time.sleep(args.every)
        stop.set()
        for t in threads:  # let requests in flight finish: SIGTERM would cut them off (uvicorn answers 500)
            t.join(timeout=300)
        health = httpx.get(f"{url}/healthz").json()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        log = (tmp / "serve.log").read_text(errors="replace")
        failures = log.count("Traceback")
        (RESULTS / f"{args.out}-server.log").write_text(log[-200_000:])  # kept: the 5xx causes are in it
    at = {
        f"rss_{m}min_gib": round(next((r for t, r in samples if t >= m * 60), samples[-1][1]) / 2**30, 3)
        for m in (1, 10, 30)
    }
    warm = [r for t, r in samples if t >= 60] or [r for _, r in samples]
    out: dict[str, Any] = {
        "benchmark": "soak",
        "minutes": args.minutes,
        "clients": args.clients,
        "ram_tier": args.ram,
        "tuned": not args.no_tune,
        "weights_gib": round(weights / 2**30, 3),
        "bound_gib": round(bound / 2**30, 3),
        **at,
        "rss_max_after_warmup_gib": round(max(warm) / 2**30, 3),
        "within_bound": max(warm) <= bound,
        "cache_bytes_gib": round(health["cache"]["bytes"] / 2**30, 3),
        "server_tracebacks": failures,
        **counts,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.out}.json").write_text(json.dumps({**out, "samples": samples}, indent=1))
    _plot(samples, bound, RESULTS / f"{args.out}.png")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
