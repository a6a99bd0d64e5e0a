"""RedisTier on a 3-master Redis Cluster (throwaway servers on loopback), in one run:

- healthy: a batch of 32 blocks spread over the masters, read with one pipeline per master sent
  to all masters at once (the tier) vs one master after the other (the same code with the thread
  pool replaced by an inline executor), p50/p99 per batch, small (16 KiB) and large (625 KiB) blocks.
- one master hung (SIGSTOP, ``cluster-require-full-coverage no``): the share of blocks served per
  batch (expected: the healthy masters' share, about 2/3), the first batch's latency (one timeout:
  50 ms) and the later batches' p50/p99 next to the healthy p50 of the same blocks.

Writes benchmarks/results/redis_cluster.json and .png. Run: .venv/bin/python benchmarks/tiers/bench_redis_cluster.py
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from ctxcache.tiers import RedisTier

OUT = Path(__file__).resolve().parents[1] / "results"
REPS = 200 if "--quick" in sys.argv else 1000
TOK = np.arange(16, dtype="<i4").tobytes()
KEYS = [i.to_bytes(16, "little") for i in range(32)]


class Inline:
    """An executor that runs each task at once: the masters are asked one after the other."""

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        f: Future[Any] = Future()
        f.set_result(fn(*args))
        return f

    def shutdown(self, wait: bool = True) -> None:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_cluster(tmp: Path) -> list[tuple[subprocess.Popen[bytes], int]]:
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit(json.dumps({"bench": "redis_cluster", "error": "redis-server not installed"}))
    nodes = []
    for i in range(3):
        port, bus = free_port(), free_port()
        (tmp / str(i)).mkdir()
        args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(tmp / str(i)), "--cluster-enabled", "yes", "--cluster-port", str(bus)]
        args += ["--cluster-node-timeout", "1000", "--cluster-require-full-coverage", "no"]
        nodes.append((subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port, bus))
    clients = [redis.Redis(port=p, socket_timeout=2) for _, p, _ in nodes]
    for c in clients:
        while True:
            try:
                c.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.02)
    per = 16384 // 3
    for i, c in enumerate(clients):
        c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, 16383 if i == 2 else (i + 1) * per - 1)
    for _, p, bus in nodes[1:]:
        clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", p, bus)
    while not all(b"cluster_state:ok" in c.execute_command("CLUSTER", "INFO") for c in clients):
        time.sleep(0.05)
    return [(proc, port) for proc, port, _ in nodes]


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1e3


def healthy(t: RedisTier) -> dict[str, float]:
    """Per-batch ms, both ways interleaved (a busy machine slows them alike)."""
    assert t._masters is not None
    pool, times = t._masters._pool, {"parallel": [], "sequential": []}  # type: ignore[var-annotated]
    for rep in range(2 * REPS):
        mode = "parallel" if rep % 2 else "sequential"
        t._masters._pool = pool if mode == "parallel" else Inline()  # type: ignore[assignment]
        t0 = time.perf_counter()
        assert all(b is not None for b in t.load_many(KEYS, [TOK] * len(KEYS)))
        times[mode].append(time.perf_counter() - t0)
    t._masters._pool = pool
    out = {f"{m}_{q}_ms": round(pct(v, p), 3) for m, v in times.items() for q, p in (("p50", 0.5), ("p99", 0.99))}
    out["parallel_vs_sequential_p50"] = round(out["parallel_p50_ms"] / out["sequential_p50_ms"], 3)
    return out


def hung(t: RedisTier, proc: subprocess.Popen[bytes]) -> dict[str, float]:
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        lat, served = [], []
        for _ in range(min(REPS, 200)):  # well within the 1 s node timeout's consequences: none here
            t0 = time.perf_counter()
            got = t.load_many(KEYS, [TOK] * len(KEYS))
            lat.append(time.perf_counter() - t0)
            served.append(sum(b is not None for b in got) / len(KEYS))
        down = t.masters_down
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    return {"first_batch_ms": round(lat[0] * 1e3, 2), "later_p50_ms": round(pct(lat[1:], 0.5), 3),
            "later_p99_ms": round(pct(lat[1:], 0.99), 3), "served_share": round(statistics.mean(served), 3),
            "masters_down": len(down)}  # fmt: skip


def main() -> None:
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        nodes = start_cluster(Path(tmp))
        try:
            for name, floats in (("16KiB", 4096), ("625KiB", 160_000)):
                t = RedisTier(1 << 34, url=f"redis://127.0.0.1:{nodes[0][1]}", cluster=True, prefix=f"b{name}:")
                assert t.wait_ready(10)
                assert all(t.put_blobs([(k, t.codec.encode(np.zeros(floats, np.float32), k, TOK)) for k in KEYS]))
                rows[name] = healthy(t)
                if name == "16KiB":
                    rows["hung"] = hung(t, nodes[1][0]) | {"healthy_p50_ms": rows[name]["parallel_p50_ms"]}
                print(json.dumps({"bench": "redis_cluster", "figure": name, **rows[name]}), flush=True)
                t.close()
        finally:
            for proc, _ in nodes:
                proc.kill()
    print(json.dumps({"bench": "redis_cluster", "figure": "one_master_hung", **rows["hung"]}), flush=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "redis_cluster.json").write_text(json.dumps(rows, indent=1) + "\n")
    plot(rows)


def plot(rows: dict[str, Any]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    sizes, x = ["16KiB", "625KiB"], np.arange(2)
    for off, mode in ((-0.2, "sequential"), (0.2, "parallel")):
        ax.bar(x + off, [rows[s][f"{mode}_p50_ms"] / rows[s]["sequential_p50_ms"] for s in sizes], 0.4, label=mode)
    ax.set_xticks(x, [f"32 x {s} blocks" for s in sizes])
    ax.set_ylabel("p50 batch latency / sequential")
    ax.set_title("RedisTier, 3-master cluster: masters asked at once vs in turn")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "redis_cluster.png", dpi=120)


if __name__ == "__main__":
    main()
