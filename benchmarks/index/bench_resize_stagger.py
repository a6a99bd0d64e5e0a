"""How many inserts resize the shards of several maps at once, one selector for all maps vs one each.

The index, the memory tier and the slot each keep a 256-way sharded map of every block, the
LRU/FIFO order a 1,021-way one (``shardmap.ORDER_SHARDS``). A shard's table is rebuilt when an
insert finds it full; which insert that is depends
only on how many keys the shard holds. This counts, for 16-byte random keys inserted one by one up
to ``--blocks``, the inserts at which 2, 3 or 4 of the maps rebuild a shard, for the old choice
(every map by ``key[-1]``) and the current one (``shardmap.SELECTORS``: the index by
``key[-1]``, the others by ``hash(key) % p``, a prime each; the keys' Python hashes are computed). The rebuild points are read off a real dict (``sys.getsizeof`` jumps; every map is a
plain dict), so this follows the interpreter's growth rule; the per-insert arithmetic is numpy.
(Growth only: the order's dicts also compact after hits, which this does not model.) Prints one JSON line, writes
benchmarks/results/resize_stagger.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ctxcache.shardmap import NSHARDS, ORDER_SHARDS, SELECTORS

OUT = Path(__file__).resolve().parents[1] / "results" / "resize_stagger.json"


def rebuild_points(limit: int) -> list[int]:
    """Shard sizes (keys after the insert) at which a dict rebuilds its table."""
    points: list[int] = []
    d: dict[int, None] = {}
    last = sys.getsizeof(d)
    for i in range(limit):
        d[i] = None
        size = sys.getsizeof(d)
        if size != last and i > 0:
            points.append(i + 1)
        last = size
    return points


def ordinals(shard: np.ndarray) -> np.ndarray:
    """For each insert, how many keys its shard holds after it (1 for the shard's first key)."""
    order = np.argsort(shard, kind="stable")
    counts = np.bincount(shard)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    ranks = np.empty_like(order)
    ranks[order] = np.arange(len(shard)) - np.repeat(starts, counts)
    return ranks + 1


def count(shards: list[np.ndarray], points: list[int], large: int) -> dict[str, Any]:
    """Inserts at which k maps rebuild a shard (k = 1..4), for all rebuilds and for those of shards
    of at least ``large`` keys (the costly ones), and where the last multi-map ones fall."""
    events = np.zeros(len(shards[0]), dtype=np.int8)
    big = np.zeros(len(shards[0]), dtype=np.int8)
    for shard in shards:
        ords = ordinals(shard)
        events += np.isin(ords, points)
        big += np.isin(ords, [p for p in points if p >= large])
    hist, hist_big = np.bincount(events, minlength=5), np.bincount(big, minlength=5)
    multi = np.nonzero(big >= 2)[0]
    return {
        "inserts_with_k_maps_rebuilding": {str(k): int(hist[k]) for k in range(1, 5)},
        f"same, shards of >= {large} keys": {str(k): int(hist_big[k]) for k in range(1, 5)},
        "shard_rebuilds": int(events.sum()),
        "last_large_multi_map_inserts": [int(i) + 1 for i in multi[-5:]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=10_000_000)
    ap.add_argument("--large", type=int, default=5462, help="a costly rebuild: a shard of this many keys")
    args = ap.parse_args()
    keys = np.random.default_rng(0).integers(0, 256, size=(args.blocks, 16), dtype=np.uint8)
    points = rebuild_points(2 * args.blocks // NSHARDS + 1000)
    k = keys.astype(np.int64)
    buf = keys.tobytes()
    h = np.fromiter((hash(buf[i : i + 16]) for i in range(0, len(buf), 16)), dtype=np.int64, count=args.blocks)
    # Each owner's selector, vectorized (numpy's % takes the divisor's sign, as Python's does).
    each = [k[:, -1], h % 241, h % 239, h % ORDER_SHARDS]
    probes = [bytes(keys[i]) for i in range(min(1000, args.blocks))]
    for o, col in zip(("index", "tier", "owners", "order"), each):
        assert [SELECTORS[o](p) for p in probes] == col[: len(probes)].tolist(), o
    result = {
        "bench": "resize_stagger",
        "blocks": args.blocks,
        "rebuild_points_dict": points,
        "one_selector_for_all": count([k[:, -1]] * 4, points, args.large),
        "selector_per_owner": count(each, points, args.large),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
