"""Where a deep lookup's time goes when stores run between lookups (as in bench_index_growth), both
trees side by side.

bench_lookup_ab.py times lookups back to back, so the maps' dict headers and the tables' hot lines
stay in the CPU caches. In the growth run a store and the constant-work op run between two
lookups, and each new block's objects push those lines out. This grows one cache per tree to
``--blocks`` (bench_index_growth's workload), then for ``--ops`` steps stores the workload's next
prompt, runs the constant-work op and times one part of a depth-8 lookup in turn: the whole lookup
+ release, the index walk (hashing included), the memory tier's ``get_many`` and the policy's
``on_hits`` (µs of thread CPU, medians). Each tree runs in its own process (PYTHONPATH, as
bench_index_growth does), both at once. Prints one JSON line; writes
benchmarks/results/lookup_parts_cold.json.

    python benchmarks/index/bench_lookup_parts_cold.py --blocks 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "lookup_parts_cold.json"
PARTS = ("lookup", "walk", "get_many", "on_hits")


def worker(n: int, ops: int) -> dict[str, Any]:
    import gc

    from bench_lookup_ab import grow
    from index_growth_worker import BS, MAX_DEPTH, PAYLOAD, constant_work, prompt_tokens

    import ctxcache

    parent, depth = grow(n + ops, 0)
    base = np.arange(BS, dtype=np.int32)
    cache = ctxcache.ContextCache.from_config({"block_size": BS, "tiers": [{"kind": "memory", "capacity": "64GiB"}]})
    for i in range(n):
        cache.store(prompt_tokens(i, parent, base), [PAYLOAD], first_block=int(depth[i]))
    gc.collect()
    gc.freeze()
    e, ns = cache._engine, cache._engine.namespace("default")
    walk_kw = {"shards": e.index.shards} if hasattr(e.index, "shards") else {"get": e.index.getter}
    deep, rng, clk = np.nonzero(depth[:n] == MAX_DEPTH - 1)[0], np.random.default_rng(1), time.thread_time_ns
    got: dict[str, list[int]] = {p: [] for p in PARTS}
    for j in range(ops):
        i = n + j
        cache.store(prompt_tokens(i, parent, base), [PAYLOAD], first_block=int(depth[i]))
        constant_work()
        toks = prompt_tokens(int(rng.choice(deep)), parent, base)
        part = PARTS[j % len(PARTS)]
        if part == "lookup":
            t0 = clk()
            cache.release(cache.lookup(toks))
            got[part].append(clk() - t0)
            continue
        prompt = e.hasher.prompt(toks, ns)
        if part == "walk":
            t0 = clk()
            e.hasher.walk(prompt, **walk_kw)
            got[part].append(clk() - t0)
            continue
        keys = prompt.keys()
        fn = e.slots[0].tier.get_many if part == "get_many" else e.slots[0].policy.on_hits
        arg = keys if part == "get_many" else keys[::-1]
        t0 = clk()
        fn(arg)
        got[part].append(clk() - t0)
    return {"ctxcache": ctxcache.__file__, "us": {p: round(statistics.median(v) / 1e3, 2) for p, v in got.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=1_000_000)
    ap.add_argument("--ops", type=int, default=40_000)
    ap.add_argument("--baseline", default="ff0c450")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.blocks, args.ops)))
        return
    from bench_index_growth import baseline_tree

    trees = {"base": baseline_tree(args.baseline), "new": ROOT / "src"}
    cmd = [sys.executable, __file__, "--worker", "--blocks", str(args.blocks), "--ops", str(args.ops)]
    procs = {
        name: subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=str(src)), stdout=subprocess.PIPE, text=True)
        for name, src in trees.items()
    }
    runs = {name: json.loads(p.communicate()[0].strip().splitlines()[-1]) for name, p in procs.items()}
    for name, src in trees.items():
        assert Path(runs[name]["ctxcache"]).is_relative_to(src), f"{name} imported {runs[name]['ctxcache']}"
    us = {name: r["us"] for name, r in runs.items()}
    result = {
        "bench": "lookup_parts_cold",
        "blocks": args.blocks,
        "ops": args.ops,
        "prompt_blocks": 8,
        "us": us,
        "new_over_base": {p: round(us["new"][p] / us["base"][p], 3) for p in PARTS},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
