"""The LRU/FIFO order alone: which sharded structure keeps its tail short while it grows to 10 M keys.

``OrderedPolicy`` keeps one global order of every block, split into shards (one map of every block
rebuilds its whole table at each doubling), each key carrying an increasing stamp. This compares
the candidates it was chosen from, each in the same process, on the same keys:

- ``ordereddict-4096``: the previous code, 4,096 ``OrderedDict`` shards; a hit is ``move_to_end``
  plus a stamp write.
- ``dict-256`` / ``dict-1024``: plain dicts (they keep insertion order); a hit is a delete and a
  re-insert with a new stamp. The deleted entries stay in the table until the dict rebuilds
  (compacts) it, so a hit-heavy shard rebuilds every ~n hits besides growing, and reading a shard's
  front skips the deleted entries left there by evictions.

- ``native-order``: the compiled order LRU/FIFO use when ``ctxcache._native`` is built
  (``_native.Order``: a linked list over slot ids, 1,024 open-addressing tables; issue 30); a hit
  is one C call. Measured only where the module is built.

Two workloads, CPU time per op (``time.thread_time_ns``):

- **growth** (bench_index_growth's shape): per op one new key and 4 hits on random earlier keys;
  per decade of keys p50, p99.9, max and the ops over 50 us and 1 ms.
- **eviction** (steady state, after growth): per op one new key, then the oldest key of a random
  shard leaves (its front: the cost a dict adds is skipping leading deleted entries).

Prints one JSON line, writes benchmarks/results/order_shards.{json,png}.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import itertools
import json
import os
import random
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "results" / "order_shards"
VARIANTS = {"ordereddict-4096": (OrderedDict, 4096), "dict-256": (dict, 256), "dict-1024": (dict, 1024)}
HITS = 4


def shard_of(key: bytes, n: int) -> int:
    """The bytes selector the code uses, for 256, 1,024 or 4,096 shards."""
    if n == 256:
        return key[-4]
    return key[-4] << 2 | key[-5] & 3 if n == 1024 else key[-4] << 4 | key[-5] & 15


def summarize(lat: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    lo = 1000
    while lo < len(lat):
        hi = min(lo * 10, len(lat))
        a = lat[lo:hi]
        p50, p999 = np.percentile(a, [50, 99.9])
        out[f"{lo}-{hi}"] = {
            "p50_us": round(p50 / 1e3, 2),
            "p99.9_us": round(p999 / 1e3, 2),
            "max_us": round(float(a.max()) / 1e3, 1),
            "ops_over_50us": int((a > 50_000).sum()),
            "ops_over_1ms": int((a > 1_000_000).sum()),
        }
        lo = hi
    return out


def growth(kind: Any, n_shards: int, keys: list[bytes], label: str) -> tuple[list[Any], np.ndarray]:
    shards: list[Any] = [kind() for _ in range(n_shards)]
    tick, rnd, clock = itertools.count(), random.Random(1).random, time.thread_time_ns
    lat = np.zeros(len(keys), dtype=np.uint32)
    od = kind is OrderedDict
    for i, key in enumerate(keys):
        hit = [keys[int(rnd() * i)] for _ in range(HITS)] if i else []
        t0 = clock()
        shards[shard_of(key, n_shards)][key] = next(tick)
        for h in hit:
            d = shards[shard_of(h, n_shards)]
            if od:
                d.move_to_end(h)
            else:
                del d[h]
            d[h] = next(tick)
        lat[i] = min(clock() - t0, 2**32 - 1)
        if i % 500_000 == 0:
            sys.stderr.write(f"\r{label:>18} growth {i / len(keys):6.1%}")
    return shards, lat


def growth_native(keys: list[bytes], label: str) -> tuple[Any, np.ndarray]:
    """As ``growth``, through the compiled order's methods (the LRU's on_insert and on_hit)."""
    from ctxcache._native import Order

    order, rnd, clock = Order(), random.Random(1).random, time.thread_time_ns
    insert, hit1 = order.on_insert, order.on_hit
    lat = np.zeros(len(keys), dtype=np.uint32)
    for i, key in enumerate(keys):
        hit = [keys[int(rnd() * i)] for _ in range(HITS)] if i else []
        t0 = clock()
        insert(key)
        for h in hit:
            hit1(h)
        lat[i] = min(clock() - t0, 2**32 - 1)
        if i % 500_000 == 0:
            sys.stderr.write(f"\r{label:>18} growth {i / len(keys):6.1%}")
    return order, lat


def eviction_native(order: Any, n_ops: int, label: str) -> dict[str, Any]:
    """One new key, then the global front leaves (the dict variants drop a random shard's front)."""
    clock = time.thread_time_ns
    lat = np.zeros(n_ops, dtype=np.uint32)
    for i in range(n_ops):
        key = os.urandom(16)
        t0 = clock()
        order.on_insert(key)
        order.evict()
        lat[i] = min(clock() - t0, 2**32 - 1)
        if i % 100_000 == 0:
            sys.stderr.write(f"\r{label:>18} eviction {i / n_ops:6.1%}")
    p50, p999 = np.percentile(lat, [50, 99.9])
    return {"p50_us": round(p50 / 1e3, 2), "p99.9_us": round(p999 / 1e3, 2), "max_us": round(float(lat.max()) / 1e3, 1)}


def eviction(shards: list[Any], n_ops: int, label: str) -> dict[str, Any]:
    n, rnd, clock = len(shards), random.Random(2).random, time.thread_time_ns
    tick = itertools.count(10**9)
    lat = np.zeros(n_ops, dtype=np.uint32)
    for i in range(n_ops):
        key = os.urandom(16)
        d = shards[int(rnd() * n)]
        t0 = clock()
        shards[shard_of(key, n)][key] = next(tick)
        if d:
            del d[next(iter(d))]
        lat[i] = min(clock() - t0, 2**32 - 1)
        if i % 100_000 == 0:
            sys.stderr.write(f"\r{label:>18} eviction {i / n_ops:6.1%}")
    p50, p999 = np.percentile(lat, [50, 99.9])
    return {"p50_us": round(p50 / 1e3, 2), "p99.9_us": round(p999 / 1e3, 2), "max_us": round(float(lat.max()) / 1e3, 1)}


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, r in result["variants"].items():
        dec = list(r["growth"])
        ax.plot(dec, [r["growth"][d]["p99.9_us"] for d in dec], marker="o", label=f"{name} p99.9")
        ax.plot(dec, [r["growth"][d]["p50_us"] for d in dec], marker=".", ls="--", label=f"{name} p50")
    ax.set_yscale("log")
    ax.set_xlabel("keys in the order (decade)")
    ax.set_ylabel(f"µs of CPU per op (1 insert + {HITS} hits)")
    ax.set_title("LRU order alone, growing: OrderedDict shards, plain dict shards, the compiled order")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--evictions", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=OUT, help="results path, without suffix")
    ap.add_argument("--only", default="", help="comma-separated variants (default: all)")
    args = ap.parse_args()
    only = set(args.only.split(",")) - {""}
    keys = [os.urandom(16) for _ in range(args.keys)]
    gc.collect()
    gc.freeze()
    gc.disable()  # the structures hold bytes and ints only: no collection can free anything here
    result: dict[str, Any] = {"bench": "order_shards", "keys": args.keys, "hits_per_op": HITS, "variants": {}}
    for name, (kind, n_shards) in VARIANTS.items():
        if only and name not in only:
            continue
        shards, lat = growth(kind, n_shards, keys, name)
        result["variants"][name] = {"growth": summarize(lat), "eviction": eviction(shards, args.evictions, name)}
        del shards, lat
    if importlib.util.find_spec("ctxcache._native") is not None and (not only or "native-order" in only):
        order, lat = growth_native(keys, "native-order")
        result["variants"]["native-order"] = {
            "growth": summarize(lat),
            "eviction": eviction_native(order, args.evictions, "native-order"),
        }
        del order, lat
    sys.stderr.write("\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    plot(result, args.out)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
