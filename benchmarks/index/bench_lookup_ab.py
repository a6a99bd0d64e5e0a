"""Where a deep lookup's time goes, today's tree against the baseline, both caches in one process.

bench_index_growth.py runs each tree in its own process, so a p50 gap between them mixes the code
with the machine's drift. Here both trees' caches are built in one process (the second tree is
imported after the first one's modules are dropped from ``sys.modules``; each cache keeps the
classes it was made with), grown to the same blocks (bench_index_growth's workload), and timed in
alternating rounds on the same prompts: the whole lookup + release of depth-8 prompts, and two of
its parts on the same 8 keys, the policy's ``on_hits`` and the memory tier's ``get_many``; and the
store of the workload's next prompts (a random earlier prompt plus one new block), the same
prompts in both caches. Prints one JSON line (µs, the median of the rounds).

    python benchmarks/index/bench_lookup_ab.py --blocks 1500000 > benchmarks/results/lookup_ab.json
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
from index_growth_worker import BS, MAX_DEPTH, PAYLOAD, prompt_tokens

ROOT = Path(__file__).resolve().parents[2]


def load_cache_class(src: Path) -> Any:
    for name in [m for m in sys.modules if m == "ctxcache" or m.startswith("ctxcache.")]:
        del sys.modules[name]
    sys.path.insert(0, str(src))
    try:
        import ctxcache
    finally:
        sys.path.remove(str(src))
    return ctxcache.ContextCache


def grow(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    parent, depth = np.full(n, -1, dtype=np.int32), np.zeros(n, dtype=np.int8)
    for i in range(1, n):
        j = int(rng.random() * i)
        if depth[j] < MAX_DEPTH - 1 and rng.random() >= 1 / MAX_DEPTH:
            parent[i], depth[i] = j, depth[j] + 1
    return parent, depth


STORES_PER_ROUND = 2000


def timed_round(cache: Any, toks: list[np.ndarray], new: list[tuple[np.ndarray, int]]) -> dict[str, float]:
    e, clock = cache._engine, time.thread_time_ns
    t0 = clock()
    for t, d in new:
        cache.store(t, [PAYLOAD], first_block=d)
    stored = (clock() - t0) / len(new) / 1e3
    t0 = clock()
    for t in toks:
        cache.release(cache.lookup(t))
    out = {"lookup": (clock() - t0) / len(toks) / 1e3}
    keys = []
    for t in toks:
        m = cache.lookup(t)
        keys.append(m.keys[::-1])  # deepest first, as the lookup passes them
        cache.release(m)
    for part, fn in (("on_hits", e.slots[0].policy.on_hits), ("get_many", e.slots[0].tier.get_many)):
        t0 = clock()
        for k in keys:
            fn(k)
        out[part] = (clock() - t0) / len(keys) / 1e3
    out["store"] = stored
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=1_500_000)
    ap.add_argument("--baseline", default="ff0c450")
    ap.add_argument("--rounds", type=int, default=16)
    args = ap.parse_args()
    from bench_index_growth import baseline_tree

    trees = {"base": baseline_tree(args.baseline), "new": ROOT / "src"}
    total = args.blocks + args.rounds * STORES_PER_ROUND  # the rounds store the ids past --blocks
    parent, depth = grow(total, 0)
    base = np.arange(BS, dtype=np.int32)
    caches, origins = {}, {}
    for name, src in trees.items():
        cache = load_cache_class(src).from_config(
            {"block_size": BS, "tiers": [{"kind": "memory", "capacity": "64GiB"}]}
        )
        for i in range(args.blocks):
            cache.store(prompt_tokens(i, parent, base), [PAYLOAD], first_block=int(depth[i]))
            if i % 100_000 == 0:
                sys.stderr.write(f"\r{name}: {i / args.blocks:6.1%} built")
        caches[name] = cache
        origin = Path(sys.modules[type(cache._engine.slots[0].policy).__module__].__file__ or "")
        assert origin.is_relative_to(src), f"{name}: imported {origin}, not from {src}"
        origins[name] = str(origin)
    sys.stderr.write("\n")
    gc.collect()
    gc.freeze()
    deep, rng = np.nonzero(depth[: args.blocks] == MAX_DEPTH - 1)[0], np.random.default_rng(1)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in caches}
    for r in range(args.rounds):
        toks = [prompt_tokens(int(k), parent, base) for k in rng.choice(deep, 2000)]
        ids = range(args.blocks + r * STORES_PER_ROUND, args.blocks + (r + 1) * STORES_PER_ROUND)
        new = [(prompt_tokens(i, parent, base), int(depth[i])) for i in ids]
        for name in ("base", "new") if r % 2 else ("new", "base"):
            runs[name].append(timed_round(caches[name], toks, new))
    result = {
        "bench": "lookup_ab",
        "blocks": args.blocks,
        "prompt_blocks": MAX_DEPTH,
        # Which code each cache runs: its policy's module file, and the order's class (C or Python).
        "policy_from": origins,
        "order": {n: type(c._engine.slots[0].policy).__mro__[1].__qualname__ for n, c in caches.items()},
        "key_walk": {n: c._engine.hasher._native is not None for n, c in caches.items()},
        "us": {n: {p: round(statistics.median(x[p] for x in v), 2) for p in v[0]} for n, v in runs.items()},
    }
    result["new_over_base"] = {
        p: round(result["us"]["new"][p] / result["us"]["base"][p], 3) for p in result["us"]["new"]
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
