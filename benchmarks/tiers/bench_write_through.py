"""What write-through costs: RAM + disk + Redis with both slow tiers ``write = "through"`` (the
defaults) against both ``write = "demote"`` (the behaviour before), side by side in one run.

Blocks are shaped like the server's for Gemma 3 270M at its block size of 32 tokens (18 layers,
K and V of [1, 32, 256] float32: 1.18 MB), four new blocks per store (no hits), a hot RAM tier of
256 MiB (so RAM evicts after ~54 stores: demote mode writes then), a disk tier with fsync (the
default) and a real redis-server on loopback (started here, no persistence). Three loads per mode:

- ``server``: 2 stores a second (9.4 MB/s per tier), above what one CPU `ctxcache serve` worker
  stores (a 1k-token prefill takes seconds on this host): the figure for a server;
- ``paced``: 10 stores a second (47 MB/s per tier), a GPU worker's rate;
- ``burst``: stores back to back, faster than the disk and Redis take them: what bounds the queue
  (``write_buffer``, 256 MiB by default) and how many copies are dropped.

Three modes: ``through`` (write_lag 1 s, today's default: a store waits while the mover is more
than a second behind, so a SIGKILL loses at most that second), ``through-nolag`` (write_lag 0: the
store never waits, the behaviour before write_lag) and ``demote``. Runs go through, through-nolag,
demote, demote, through-nolag, through (drift of the shared machine cancels). Figures per
mode and load: store p50/p99 (the request path), bytes written to disk and Redis per second of the
load (blobs the mover handed each tier, measured at the tier), mover queue depth p50/peak and the
peak write-buffer bytes and mover lag (oldest queued write's age: what a SIGKILL would lose), copies
queued and dropped, demotions skipped, and the drain time after the last store. Prints one JSON
line; writes benchmarks/results/bench_write_through.json and .png.

Run: .venv/bin/python benchmarks/tiers/bench_write_through.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ctxcache import ContextCache
from ctxcache.tiers import DiskTier, MemoryTier, RedisTier, Tier

OUT = Path(__file__).resolve().parents[1] / "results"
BS = 32
LAYERS, HEAD_DIM = 18, 256
BLOCKS_PER_STORE = 4
LOADS = (("server", 2.0), ("paced", 10.0), ("burst", None))  # stores a second (None: back to back)

ORDER = ("through", "through-nolag", "demote", "demote", "through-nolag", "through")
COUNTED = (
    "through_writes",
    "through_dropped",
    "demotions",
    "demotions_skipped",
    "write_lag_waits",
    "write_lag_overruns",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit(json.dumps({"bench": "write_through", "error": "redis-server not installed"}))
    port = free_port()
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_timeout=2)
    for _ in range(200):
        try:
            client.ping()
            return proc, port
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit(json.dumps({"bench": "write_through", "error": "redis-server did not start"}))


def count_writes(tier: Tier, into: dict[str, int]) -> None:
    """Count the blob bytes the mover hands ``tier`` (landed or not), per tier name."""
    put = tier.put_blobs

    def counted(items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        into[tier.name] = into.get(tier.name, 0) + sum(len(b) for _, b in items)
        return put(items)

    tier.put_blobs = counted  # type: ignore[method-assign]


def block(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal((1, BS, HEAD_DIM), dtype=np.float32) for _ in range(2 * LAYERS)]


def make_cache(tmp: Path, port: int, mode: str, run: int, written: dict[str, int]) -> ContextCache:
    """``mode``: "through" (write_lag 1 s, the default), "through-nolag" (write_lag 0: the store never
    waits for the queue, the behaviour before write_lag) or "demote"."""
    write, lag = mode.split("-")[0], 0.0 if mode.endswith("nolag") else 1.0
    disk = DiskTier(4 << 30, path=tmp / f"disk-{write}-{run}", write=write)  # fsync on: the default
    red = RedisTier(4 << 30, url=f"redis://127.0.0.1:{port}/0", prefix=f"wt{run}{write}:", timeout=2.0, write=write)
    assert red.wait_ready()
    for t in (disk, red):
        count_writes(t, written)
    return ContextCache([MemoryTier(256 << 20), disk, red], block_size=BS, write_lag=lag)


def load(cache: ContextCache, stores: int, rate: float | None, base: int, rng: np.random.Generator) -> dict[str, Any]:
    """``stores`` stores of new prompts (paced at ``rate`` a second, or back to back)."""
    payloads = [block(rng) for _ in range(8)]  # reused: generating 1.2 MB per block would dominate
    lat, depth, buf, lag = [], [], [], []
    t0 = time.perf_counter()
    for i in range(stores):
        if rate is not None:
            time.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
        toks = [(base + i) * 1000 + j for j in range(BLOCKS_PER_STORE * BS)]
        blocks = [payloads[(i + b) % len(payloads)] for b in range(BLOCKS_PER_STORE)]
        s0 = time.perf_counter()
        cache.store(toks, blocks)
        lat.append(time.perf_counter() - s0)
        st = cache.stats()
        depth.append(st["pending_moves"])
        buf.append(st["write_buffer_bytes"])
        lag.append(st["mover_lag_s"])
    load_s = time.perf_counter() - t0
    d0 = time.perf_counter()
    cache.flush()
    return {"lat": lat, "depth": depth, "buf": buf, "lag": lag, "load_s": load_s, "drain_s": time.perf_counter() - d0}


def summarise(
    runs: list[dict[str, Any]], written: dict[str, int], c0: dict[str, int], c1: dict[str, int]
) -> dict[str, Any]:
    lat = [x for r in runs for x in r["lat"]]
    depth = [x for r in runs for x in r["depth"]]
    secs = sum(r["load_s"] + r["drain_s"] for r in runs)
    q = statistics.quantiles(lat, n=100)
    return {
        "store_p50_ms": round(statistics.median(lat) * 1e3, 3), "store_p99_ms": round(q[98] * 1e3, 3),
        "disk_MBps": round(written.get("disk", 0) / secs / 1e6, 1), "redis_MBps": round(written.get("redis", 0) / secs / 1e6, 1),
        "disk_MB": round(written.get("disk", 0) / 1e6, 1), "redis_MB": round(written.get("redis", 0) / 1e6, 1),
        "queue_p50": statistics.median(depth), "queue_peak": max(depth),
        "buffer_peak_MiB": round(max(x for r in runs for x in r["buf"]) / 2**20, 1),
        "lag_peak_s": round(max(x for r in runs for x in r["lag"]), 3),
        "drain_s": round(max(r["drain_s"] for r in runs), 3),
        **{k: c1[k] - c0.get(k, 0) for k in COUNTED},
    }  # fmt: skip


def one_mode(tmp: Path, port: int, write: str, run: int, stores: int, rng: np.random.Generator) -> dict[str, Any]:
    """Both loads on a fresh cache: paced first, then a burst."""
    written: dict[str, int] = {}
    cache = make_cache(tmp, port, write, run, written)
    out: dict[str, Any] = {}
    for k, (name, rate) in enumerate(LOADS):
        before, c0 = dict(written), cache.stats()
        r = load(cache, stores // 2 if name == "server" else stores, rate, run * 100_000 + k * 20_000, rng)
        delta = {k: written.get(k, 0) - before.get(k, 0) for k in written}
        out[name] = (r, delta, c0, cache.stats())
    cache.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: 20 stores per load (10 in server)")
    args = ap.parse_args()
    stores = 20 if args.quick else 100
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        proc, port = start_redis(tmp)
        try:
            raw: dict[str, list[dict[str, Any]]] = {"through": [], "through-nolag": [], "demote": []}
            for run, mode in enumerate(tqdm(ORDER, desc="modes")):  # interleaved: the host's drift hits each
                raw[mode].append(one_mode(tmp, port, mode, run, stores, rng))
        finally:
            proc.terminate()
            proc.wait(10)
    results = {w: {ld: _merge(runs, ld) for ld, _ in LOADS} for w, runs in raw.items()}
    (OUT / "bench_write_through.json").write_text(json.dumps(results, indent=1) + "\n")
    _plot(results)
    ratios = {ld: round(results["through"][ld]["store_p50_ms"] / max(results["demote"][ld]["store_p50_ms"], 1e-9), 2)
              for ld, _ in LOADS}  # fmt: skip
    line = {"bench": "write_through", "stores_per_load": stores, "blocks_per_store": BLOCKS_PER_STORE,
            "block_MB": round(2 * LAYERS * BS * HEAD_DIM * 4 / 1e6, 2), "rates": dict(LOADS),
            "store_p50_through_over_demote": ratios, "results": results}  # fmt: skip
    print(json.dumps(line))


def _merge(runs: list[dict[str, Any]], ld: str) -> dict[str, Any]:
    """Both repeats of one mode and load: latencies pooled, bytes and counters summed."""
    rs = [r[ld][0] for r in runs]
    written: dict[str, int] = {}
    c0: dict[str, int] = {}
    c1: dict[str, int] = {}
    for _, delta, a, b in (r[ld] for r in runs):
        for k, v in delta.items():
            written[k] = written.get(k, 0) + v
        for k in COUNTED:
            c0[k], c1[k] = c0.get(k, 0) + a[k], c1.get(k, 0) + b[k]
    return summarise(rs, written, c0, c1)


def _plot(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    loads, modes, width = [ld for ld, _ in LOADS], ["demote", "through-nolag", "through"], 0.27
    for ax, (key, title) in zip(axes, [("store_p50_ms", "store p50 (ms)"), ("disk_MBps", "disk MB/s written"),
                                       ("redis_MBps", "Redis MB/s written"),
                                       ("lag_peak_s", "mover lag peak (s): SIGKILL window")]):  # fmt: skip
        for j, mode in enumerate(modes):
            vals = [results[mode][ld][key] for ld in loads]
            ax.bar([i + (j - 1) * width for i in range(len(loads))], vals, width, label=f"write = {mode}")
        ax.set_xticks(range(len(loads)), loads)
        ax.set_title(title)
    axes[0].legend()
    fig.suptitle("write-through vs demote-only: RAM 256 MiB + disk (fsync) + Redis, 4 x 1.18 MB blocks per store")
    fig.tight_layout()
    fig.savefig(OUT / "bench_write_through.png", dpi=110)


if __name__ == "__main__":
    main()
