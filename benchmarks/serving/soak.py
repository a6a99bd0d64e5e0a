"""Memory under sustained load: the RSS of a real `ctxcache serve` process while clients chat.

A server process (the real model) gets --clients concurrent multi-turn chats on loopback for
--minutes. Without --ram it runs with `serve`'s own default cache (no --config: 2 GiB RAM over
10 GiB disk, here in a temporary CTXCACHE_HOME); with --ram, a RAM tier of that size over a
2 GiB disk tier. Conversations share a few system prompts, a share of them (--fresh) opens with a
document of its own (so the RAM tier fills with distinct blocks, then evicts and spills), and
they grow until they near the context limit, then start over. The server's RSS and the cache's
bytes (RAM tiers apart from disk) are sampled every few seconds; the claim is that after warm-up
the RSS stays within --bound x (model weights + configured RAM tiers).

    python benchmarks/serving/soak.py                          # 30 min, 16 clients, the default config
    python benchmarks/serving/soak.py --ram 512MiB --clients 4  # a tighter RAM tier
    python benchmarks/serving/soak.py --minutes 5 --memtrace --frames 8   # where the memory goes

--memtrace writes the server's own trace (server/memtrace.py: RSS parts, mallinfo2, threads,
each tier's accounted vs held bytes, tracemalloc growth with --frames) to results/<out>-memtrace.jsonl.
Prints one JSON line; writes benchmarks/results/<out>.json and <out>.png (RSS and cache bytes over
time). Not in CI: it runs for half an hour.
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

RESULTS = Path(__file__).resolve().parents[1] / "results"
SRC = Path(__file__).resolve().parents[2] / "src"
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


_SYSTEMS = [f"You are assistant {i}. " + " ".join(_sentence(random.Random(i), 12) for _ in range(25)) for i in range(4)]


def _document(rng: random.Random, words: int) -> str:
    return " ".join(_sentence(rng, 15) for _ in range(words // 16))


def seeded_opening(i: int, args: argparse.Namespace) -> list[dict[str, str]]:
    """Seeded document ``i``'s first prompt (system + user), the same in the seeding and the clients."""
    rng = random.Random(10_000 + i)
    system = f"{_SYSTEMS[i % len(_SYSTEMS)]}\nDocument seed-{i}:\n{_document(rng, args.doc_words)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": _sentence(rng, 20)}]


def _opening(rng: random.Random, args: argparse.Namespace) -> list[dict[str, str]]:
    """A seeded document (--seeded), a document of its own (--fresh), or a shared system prompt."""
    if args.seed_docs and rng.random() < args.seeded:
        return seeded_opening(rng.randrange(args.seed_docs), args)
    system = rng.choice(_SYSTEMS)
    if rng.random() < args.fresh:
        system = f"{system}\nDocument {rng.getrandbits(64):x}:\n{_document(rng, args.doc_words)}"
    return [{"role": "system", "content": system}]


def _client(url: str, model: str, seed: int, args: argparse.Namespace, stop: threading.Event, counts: Counts) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=900) as c:
        while not stop.is_set():
            msgs = _opening(rng, args)
            for _turn in range(rng.randint(3, 8)):
                if stop.is_set():
                    return
                if msgs[-1]["role"] != "user":
                    msgs.append(
                        {"role": "user", "content": " ".join(_sentence(rng, 15) for _ in range(rng.randint(2, 8)))}
                    )
                body = {"model": model, "max_tokens": rng.choice([8, 16, 32]), "messages": msgs, "temperature": 0.7}
                try:
                    r = c.post("/v1/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    counts.add("errors", f"{type(exc).__name__}")
                    break
                if r.status_code != 200:
                    counts.add("errors", f"http_{r.status_code}")
                    break
                usage = r.json()["usage"]
                counts.add("requests")
                counts.add("cached_tokens", n=usage["prompt_tokens_details"]["cached_tokens"])
                counts.add("prompt_tokens", n=usage["prompt_tokens"])
                msgs.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})


class Counts:
    """Client counters, shared by the client threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.n: dict[str, int] = {"requests": 0, "errors": 0, "cached_tokens": 0, "prompt_tokens": 0}
        self.kinds: dict[str, int] = {}
        self.closed = False  # set when the measurement ends

    def add(self, name: str, kind: str | None = None, n: int = 1) -> None:
        with self.lock:
            if self.closed:
                return
            self.n[name] += n
            if kind is not None:
                self.kinds[kind] = self.kinds.get(kind, 0) + 1


def _start(args: argparse.Namespace, tmp: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    from ctxcache.integrations.model_store import resolve_model

    model_dir = resolve_model(None, quiet=True)
    if args.seed_docs:
        from soak_seed import seed

        if args.ram is not None:
            raise SystemExit("--seed-docs seeds serve's default cache: use it without --ram")
        t = time.monotonic()
        args.seeding = seed(tmp, model_dir, [seeded_opening(i, args) for i in range(args.seed_docs)])
        args.seeding["seconds"] = round(time.monotonic() - t, 1)
        err.print(f"seeded the disk tier: {args.seeding}")
    extra: list[str] = []
    if args.ram is not None:
        cfg = tmp / "soak.toml"
        cfg.write_text(
            f'[server]\nmax_queue = 64\n[cache]\nblock_size = 32\n[[cache.tiers]]\nkind = "memory"\ncapacity = "{args.ram}"\n'
            f'[[cache.tiers]]\nkind = "disk"\ncapacity = "2GiB"\npath = "{tmp / "kv"}"\n'
        )
        extra = ["--config", str(cfg)]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(SRC), "CTXCACHE_HOME": str(tmp)}
    if args.no_tune:
        env["CTXCACHE_MALLOC_TUNING"] = "0"
    if args.memtrace:
        trace = RESULTS / f"{args.out}-memtrace.jsonl"
        trace.unlink(missing_ok=True)
        env.update(
            CTXCACHE_MEMTRACE=str(trace), CTXCACHE_MEMTRACE_EVERY="15", CTXCACHE_MEMTRACE_FRAMES=str(args.frames)
        )
    log = (tmp / "serve.log").open("wb")
    cmd = [sys.executable, "-c", "from ctxcache.cli import main; main()", "serve", "--model", str(model_dir)]
    proc = subprocess.Popen([*cmd, "--port", str(port), *extra], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
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


def _plot(samples: list[Sample], bound: int, ram: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.8))
    mins = [s["t"] / 60 for s in samples]
    ax.plot(mins, [s["rss"] / 2**30 for s in samples], label="server RSS")
    ax.plot(mins, [s["ram_bytes"] / 2**30 for s in samples], label="cache bytes in RAM tiers")
    ax.plot(mins, [s["disk_bytes"] / 2**30 for s in samples], label="cache bytes on disk", alpha=0.6)
    ax.axhline(bound / 2**30, color="red", linestyle="--", label="bound")
    ax.axhline(ram / 2**30, color="grey", linestyle=":", label="RAM tier capacity")
    ax.set_xlabel("minutes")
    ax.set_ylabel("GiB")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


Sample = dict[str, float]


def _sample(proc: subprocess.Popen[bytes], url: str, t: float, ram_tiers: set[str]) -> Sample:
    try:
        tiers = httpx.get(f"{url}/healthz", timeout=60).json()["cache"]["tier_bytes"]
    except (httpx.HTTPError, KeyError, ValueError):
        tiers = {}
    ram = sum(b for name, b in tiers.items() if name in ram_tiers)
    disk = sum(b for name, b in tiers.items() if name not in ram_tiers)
    return {"t": t, "rss": _rss(proc.pid), "ram_bytes": ram, "disk_bytes": disk, "load1": os.getloadavg()[0]}


def _run(args: argparse.Namespace, tmp: Path) -> tuple[list[Sample], Counts, dict[str, Any]]:
    proc, url, model_dir = _start(args, tmp)
    info: dict[str, Any] = {"weights": sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))}
    model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
    health = httpx.get(f"{url}/healthz").json()
    ram_tiers = {n for n in health["cache"]["tier_bytes"] if not n.startswith("disk")}
    stop, counts = threading.Event(), Counts()
    threads = [
        threading.Thread(target=_client, args=(url, model, 1000 + i, args, stop, counts), daemon=True)
        for i in range(args.clients)
    ]
    samples: list[Sample] = []
    t0 = time.monotonic()
    for t in threads:
        t.start()
    total = args.minutes * 60
    with Progress(
        TextColumn("soak"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
    ) as bar:
        task = bar.add_task("", total=total)
        while (now := time.monotonic() - t0) < total and proc.poll() is None:
            samples.append(_sample(proc, url, now, ram_tiers))
            s = samples[-1]
            bar.update(
                task,
                completed=now,
                description=f"RSS {s['rss'] / 2**30:.2f} GiB, RAM tier {s['ram_bytes'] / 2**30:.2f} GiB, "
                f"{counts.n['requests']} req",
            )
            time.sleep(args.every)
    # The measurement ends here. Requests still in flight (up to one per client, minutes of queue
    # on a busy machine) are cut off by the SIGTERM: their failures are not the server's errors.
    stop.set()
    counts.closed = True
    info["health"] = httpx.get(f"{url}/healthz", timeout=60).json()
    info["ram_tiers"] = sorted(ram_tiers)
    info["tracebacks"] = (tmp / "serve.log").read_text(errors="replace").count("Traceback")
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=300)
    log = (tmp / "serve.log").read_text(errors="replace")
    (RESULTS / f"{args.out}-server.log").write_text(log[-200_000:])  # kept: any 5xx cause is in it
    return samples, counts, info


def _at(samples: list[Sample], minute: float) -> Sample:
    return next((s for s in samples if s["t"] >= minute * 60), samples[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument(
        "--ram", default=None, help="RAM tier capacity over a 2 GiB disk tier (default: serve's own 2 GiB + disk)"
    )
    ap.add_argument(
        "--fresh", type=float, default=0.5, help="share of conversations opening with a document of their own"
    )
    ap.add_argument("--doc-words", type=int, default=1200)
    ap.add_argument("--seed-docs", type=int, default=0, help="documents seeded on disk before the start (soak_seed.py)")
    ap.add_argument("--seeded", type=float, default=0.5, help="share of conversations opening with a seeded document")
    ap.add_argument("--bound", type=float, default=1.3)
    ap.add_argument("--warmup", type=float, default=1.0, help="minutes excluded from the max")
    ap.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    ap.add_argument("--no-tune", action="store_true", help="run without the server's allocator settings")
    ap.add_argument("--memtrace", action="store_true", help="the server writes results/<out>-memtrace.jsonl")
    ap.add_argument("--frames", type=int, default=0, help="with --memtrace: tracemalloc frames (0: off)")
    ap.add_argument("--out", default="soak")
    args = ap.parse_args()
    from ctxcache.config import parse_size

    RESULTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ctxcache-soak-") as d:
        samples, counts, info = _run(args, Path(d))
    ram = parse_size(args.ram or "2GiB")
    bound = int(args.bound * (info["weights"] + ram))
    warm = [s for s in samples if s["t"] >= args.warmup * 60] or samples
    gib = 2**30
    out: dict[str, Any] = {
        "benchmark": "soak",
        "config": "serve default (2 GiB RAM + 10 GiB disk)" if args.ram is None else f"{args.ram} RAM + 2 GiB disk",
        **{k: getattr(args, k) for k in ("minutes", "clients", "fresh", "doc_words", "seed_docs", "seeded")},
        "seeding": getattr(args, "seeding", None),
        "tuned": not args.no_tune,
        "weights_gib": round(info["weights"] / gib, 3),
        "ram_tiers_gib": round(ram / gib, 3),
        "bound_gib": round(bound / gib, 3),
        **{f"rss_{m}min_gib": round(_at(samples, m)["rss"] / gib, 3) for m in (1, 10, 30)},
        **{f"ram_cache_{m}min_gib": round(_at(samples, m)["ram_bytes"] / gib, 3) for m in (1, 10, 30)},
        "rss_max_after_warmup_gib": round(max(s["rss"] for s in warm) / gib, 3),
        "ram_cache_max_gib": round(max(s["ram_bytes"] for s in samples) / gib, 3),
        "within_bound": max(s["rss"] for s in warm) <= bound,
        "cache_end": {k: info["health"]["cache"][k] for k in ("blocks", "bytes", "tier_bytes")},
        "load1_mean": round(sum(s["load1"] for s in samples) / len(samples), 1),
        "load1_max": round(max(s["load1"] for s in samples), 1),
        "server_tracebacks": info["tracebacks"],
        **counts.n,
        "error_kinds": counts.kinds,
    }
    (RESULTS / f"{args.out}.json").write_text(json.dumps({**out, "samples": samples}, indent=1))
    _plot(samples, bound, ram, RESULTS / f"{args.out}.png")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
