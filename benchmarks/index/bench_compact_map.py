"""What a compact key map would cost: a compiled uint64 -> uint64 hash map against a dict of bytes keys.

The issue-15 goal of <= 200 B per block needs no Python object per block (docs/ARCHITECTURE.md,
"The index at scale"): a 16-byte key object alone is 64 B, a dict entry 34-84 B. A numpy
struct-of-arrays index was measured 1.3-1.4x slower at p50 (each field read boxes a scalar). The
other way is a compiled open-addressing map from the key's first 8 bytes to a slot id, with the
records in arrays: this measures such a map from PyPI (spaCy's ``preshed.maps.PreshMap``, wheels
for CPython 3.11; not a ctxcache dependency) against the dict the index uses today, same keys, same
process: RSS per entry and the time of one lookup from Python, key-to-int conversion included.

    pip install --target build/preshed preshed==3.0.15
    PYTHONPATH=build/preshed python benchmarks/index/bench_compact_map.py

Prints one JSON line (``{"skipped": ...}`` without preshed).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument("--lookups", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    try:
        from preshed.maps import PreshMap
    except ImportError:
        print(json.dumps({"bench": "compact_map", "skipped": "preshed not installed (see the docstring)"}))
        return
    keys = [os.urandom(16) for _ in range(args.keys)]
    # 0 and 1 are PreshMap's empty/deleted markers: bit 1 set keeps every key clear of both.
    ints = [int.from_bytes(k[:8], "little") | 2 for k in keys]
    gc.collect()
    gc.disable()
    r0 = rss()
    compact = PreshMap()
    for i, k in enumerate(ints):
        compact[k] = i + 2
    r1 = rss()
    d = {}
    for i, key in enumerate(keys):
        d[key] = i  # values: ints, as slot ids would be (the dict's cost includes them)
    r2 = rss()
    sample = [keys[i] for i in range(0, args.keys, max(1, args.keys // args.lookups))]
    from_bytes, clock = int.from_bytes, time.perf_counter_ns
    best = {"dict": float("inf"), "compact": float("inf")}
    for _ in range(args.rounds):  # alternated, best of: the machine is noisy
        t0 = clock()
        for key in sample:
            d.get(key)
        t1 = clock()
        for key in sample:
            compact[from_bytes(key[:8], "little") | 2]
        t2 = clock()
        best["dict"] = min(best["dict"], (t1 - t0) / len(sample))
        best["compact"] = min(best["compact"], (t2 - t1) / len(sample))
    out = {
        "bench": "compact_map",
        "keys": args.keys,
        "rss_bytes_per_entry": {"compact": round((r1 - r0) / args.keys, 1), "dict": round((r2 - r1) / args.keys, 1)},
        "lookup_ns": {k: round(v, 1) for k, v in best.items()},
        "note": "dict bytes exclude its key objects (64 B each, shared with the other maps today)",
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
