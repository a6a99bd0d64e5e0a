"""One-block (16-token) store and lookup p50, today's tree against a baseline, in one process.

The issue's goal: a store and a one-block lookup at <= 0.5x the p50 of the tree it was filed
against (97601b5). Both trees' caches are made in one process (bench_lookup_ab's loader) and timed
in alternating rounds, each op alone: a store of a new one-block prompt (an int32 array) and a
lookup + release of a cached one (an int32 array, and the same ids as a list). Prints one JSON line.

    nice python benchmarks/index/bench_small_ab.py --baseline 97601b5
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_index_growth import baseline_tree
from bench_lookup_ab import load_cache_class

ROOT = Path(__file__).resolve().parents[2]
BS, PER_ROUND = 16, 500


def ops(cache: Any, rng: np.random.Generator, n: int) -> dict[str, Any]:
    fresh = iter(rng.integers(0, 262_144, size=(n, BS), dtype=np.int32))
    hit = rng.integers(0, 262_144, size=BS, dtype=np.int32)
    hit_list = hit.tolist()
    cache.store(hit, [b"kv"])

    def lookup(toks: Any) -> None:
        m = cache.lookup(toks)
        assert m.hit_tokens == BS
        cache.release(m)

    return {
        "store": lambda: cache.store(next(fresh), [b"kv"]),
        "lookup": lambda: lookup(hit),
        "lookup_list": lambda: lookup(hit_list),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="97601b5")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--baseline-src", help="a tree's src/ to use as the baseline instead (its _native built there)")
    args = ap.parse_args()
    trees = {
        "base": Path(args.baseline_src) if args.baseline_src else baseline_tree(args.baseline),
        "new": ROOT / "src",
    }
    n = args.rounds * PER_ROUND + 10
    runs: dict[str, dict[str, Any]] = {}
    native: dict[str, bool] = {}
    for name, src in trees.items():
        cache = load_cache_class(src).from_config({"block_size": BS, "tiers": [{"kind": "memory", "capacity": "4GiB"}]})
        runs[name] = ops(cache, np.random.default_rng(0), n)
        native[name] = getattr(cache._engine.hasher, "_native", None) is not None
    gc.collect()
    gc.freeze()
    samples: dict[str, dict[str, list[int]]] = {t: {k: [] for k in o} for t, o in runs.items()}
    clock = time.perf_counter_ns
    for r in range(args.rounds):
        for tree in ("base", "new") if r % 2 else ("new", "base"):
            for k, fn in runs[tree].items():
                out = samples[tree][k]
                for _ in range(PER_ROUND):
                    t0 = clock()
                    fn()
                    out.append(clock() - t0)
    us = {t: {k: round(statistics.median(v) / 1e3, 2) for k, v in s.items()} for t, s in samples.items()}
    result = {
        "bench": "small_ab",
        "baseline": args.baseline,
        "block_size": BS,
        "key_walk_native": native,
        "p50_us": us,
        "new_over_base": {k: round(us["new"][k] / us["base"][k], 3) for k in us["new"]},
        "python": sys.version.split()[0],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
