"""RSS per block and insert times of the compiled block table against today's index (issue 30).

Grows ``_native.BlockTable`` (native/ctxcache_blocks*.c) to N blocks (16-byte keys, 64 token bytes,
chains of 8 under one namespace root) and, in another process, today's ``RadixIndex`` plus the
LRU order (``make_policy("lru")``: the compiled ``Order`` when built) with the same blocks. Each
process reports RSS growth / N (the timing array and the key source are allocated and touched
before the baseline, so only what the structure keeps is counted; the index's keys and token
bytes objects are part of its cost, the table copies them and drops the objects) and per-insert
wall time p50/p99/p99.9/max (and how many took over 1 ms) per decade of blocks. One JSON line on stdout, the same in
benchmarks/results/blocktable.json (docs/ARCHITECTURE.md, "The compiled block table").

    nice python benchmarks/index/bench_blocktable.py                     # 10 M blocks each
    nice python benchmarks/index/bench_blocktable.py --blocks 1000000 --index-blocks 1000000
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "blocktable.json"
KEY, TOK, DEPTH, CHUNK = 16, 64, 8, 1 << 16


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def decades(ns: np.ndarray) -> dict[str, dict[str, float]]:
    out, lo = {}, 0
    hi = 10
    while lo < len(ns):
        part = ns[lo : min(hi, len(ns))] / 1000.0
        q = np.percentile(part, [50, 99, 99.9])
        out[f"{lo}-{min(hi, len(ns))}"] = {
            "p50_us": round(float(q[0]), 3),
            "p99_us": round(float(q[1]), 3),
            "p99.9_us": round(float(q[2]), 3),
            "max_us": round(float(part.max()), 1),
            "over_1ms": int((part > 1000).sum()),
        }
        lo, hi = hi, hi * 10
    return out


def grow(which: str, n: int) -> dict[str, Any]:
    """Insert n blocks into one structure, timing each insert; this process holds nothing else per block."""
    sys.path.insert(0, str(ROOT / "src"))
    from ctxcache import accel

    times = np.ones(n, dtype=np.int64)  # ones, not zeros: its pages are touched before the baseline
    rng = np.random.default_rng(30)
    keybuf = rng.bytes(KEY * CHUNK)
    tokbuf = rng.bytes(TOK * CHUNK)
    root = b"R" * KEY
    clock = time.perf_counter_ns
    if which == "table":
        from ctxcache.blocktable import block_table

        t = block_table(KEY, TOK)
        impl = type(t).__module__ + "." + type(t).__name__

        def insert(key: bytes, parent: bytes, tokens: bytes, depth: int) -> None:
            t.insert(key, parent, tokens, depth)
    else:
        from ctxcache.index import RadixIndex
        from ctxcache.policies import make_policy

        index, order = RadixIndex(), make_policy("lru")
        impl = f"RadixIndex + {type(order).__mro__[1].__module__}.{type(order).__mro__[1].__name__}"

        def insert(key: bytes, parent: bytes, tokens: bytes, depth: int) -> None:
            index.insert(key, parent, tokens, depth)
            order.on_insert(key)

    gc.collect()
    gc.freeze()  # as a server does after start-up
    base = rss()
    parent, start = root, time.monotonic()
    for c0 in range(0, n, CHUNK):
        # fresh keys per chunk: a chunk's bytes with the chunk number folded into the first 8
        salt = (c0 // CHUNK).to_bytes(8, "little")
        for j in range(min(CHUNK, n - c0)):
            i = c0 + j
            key = bytes(a ^ b for a, b in zip(salt, keybuf[KEY * j : KEY * j + 8])) + keybuf[KEY * j + 8 : KEY * j + 16]
            tokens = tokbuf[TOK * j : TOK * j + TOK]
            d = i % DEPTH
            t0 = clock()
            insert(key, parent if d else root, tokens, d)
            times[i] = clock() - t0
            parent = key
    grown = rss() - base
    out: dict[str, Any] = {
        "impl": impl,
        "blocks": n,
        "rss_bytes_per_block": round(grown / n, 1),
        "seconds": round(time.monotonic() - start, 1),
        "insert": decades(times),
        "native": accel.describe()["key_walk"],
    }
    if which == "table":
        out["memory_bytes_per_block"] = round(t.memory_bytes() / n, 1)
    return out


def child(which: str, n: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", which, "--blocks", str(n)]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=10_000_000)
    ap.add_argument("--index-blocks", type=int, default=None, help="today's index (default: --blocks; 0 skips it)")
    ap.add_argument("--child", choices=["table", "index"], help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true", help="print only (tests)")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(grow(a.child, a.blocks)))
        return
    nindex = a.blocks if a.index_blocks is None else a.index_blocks
    out: dict[str, Any] = {
        "bench": "blocktable",
        "key_bytes": KEY,
        "token_bytes": TOK,
        "table": child("table", a.blocks),
    }
    if nindex:
        out["index"] = child("index", nindex)
    out["machine"] = {"cpus": os.cpu_count(), "load": round(os.getloadavg()[0], 2)}
    line = json.dumps(out)
    print(line)
    if not a.no_write:
        OUT.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
