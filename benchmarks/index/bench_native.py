"""The compiled key walk (ctxcache._native) against the pure-Python one and vLLM's old hashing.

Three ways to key a prompt, in one process, rounds interleaved so machine noise hits each alike:
- native: ContextCache as `make install` builds it (keys.py over ctxcache._native);
- python: the same code with the pure-Python key walk (accel.use_native(False), what ran before);
- sha256_tuple: each 256-token block hashed as sha256(pickle((parent_hash, tuple(tokens)))) and
  looked up in a dict (vLLM's default before the CVE-2025-25183 fixes; bench_lookup.py's baseline).
Measured through the public API (lookup + release, store): a 32k-token lookup of 128 cached
256-token blocks from a list, an int32 array and an int64 array; a one-block (16-token) store of
a new prompt and a one-block lookup, each op timed alone, p50. Prints one JSON line and writes
benchmarks/results/native.json (issue 30's targets under "targets").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ctxcache import ContextCache, accel

N_TOKENS, BS, SMALL_BS = 32 * 1024, 256, 16
OUT = Path(__file__).resolve().parents[1] / "results" / "native.json"


def sha256_lookup(tokens: list[int], table: dict[bytes, int]) -> int:
    parent, hit = None, 0
    for i in range(len(tokens) // BS):
        parent = hashlib.sha256(pickle.dumps((parent, tuple(tokens[i * BS : (i + 1) * BS])))).digest()
        if parent not in table:
            break
        hit += 1
    return hit


def make_cache(native: bool, block_size: int, hash_name: str = "xxh3") -> ContextCache:
    accel.use_native(native)  # read by the cache's hasher as it is made
    try:
        cfg = {"block_size": block_size, "hash": hash_name, "tiers": [{"kind": "memory", "capacity": "4GiB"}]}
        return ContextCache.from_config(cfg)
    finally:
        accel.use_native(True)


def mean_us(fn: Callable[[], object], reps: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        fn()
    return (time.perf_counter_ns() - t0) / reps / 1000.0


def lookup_fn(cache: ContextCache, tokens: object, want: int) -> Callable[[], None]:
    def run() -> None:
        m = cache.lookup(tokens)  # type: ignore[arg-type]
        assert m.hit_tokens == want
        cache.release(m)

    return run


def big_modes(rng: np.random.Generator) -> dict[str, Callable[[], object]]:
    arr64 = rng.integers(0, 262_144, size=N_TOKENS, dtype=np.int64)
    arr32, lst = arr64.astype(np.int32), arr64.tolist()
    table: dict[bytes, int] = {}
    parent = None
    for i in range(N_TOKENS // BS):
        parent = hashlib.sha256(pickle.dumps((parent, tuple(lst[i * BS : (i + 1) * BS])))).digest()
        table[parent] = i
    assert sha256_lookup(lst, table) == N_TOKENS // BS
    modes: dict[str, Callable[[], object]] = {"sha256_tuple_list": lambda: sha256_lookup(lst, table)}
    for walk in ("native", "python"):
        for h in ("xxh3", "blake3"):
            c = make_cache(walk == "native", BS, h)
            c.store(arr32, [b"kv"] * (N_TOKENS // BS))
            for name, toks in (("list", lst), ("int32", arr32), ("int64", arr64)):
                if h == "xxh3" or name == "int32":
                    modes[f"{walk}_{h}_{name}"] = lookup_fn(c, toks, N_TOKENS)
    return modes


def small_ops(rng: np.random.Generator, n: int) -> dict[str, Callable[[], object]]:
    """One-block store (each call a new prompt) and lookup, as per-op closures."""
    ops: dict[str, Callable[[], object]] = {}
    for walk in ("native", "python"):
        c = make_cache(walk == "native", SMALL_BS)
        fresh = iter(rng.integers(0, 262_144, size=(n, SMALL_BS), dtype=np.int32))
        hit = rng.integers(0, 262_144, size=SMALL_BS, dtype=np.int32)
        c.store(hit, [b"kv"])
        ops[f"{walk}_store_1block"] = lambda c=c, fresh=fresh: c.store(next(fresh), [b"kv"])
        ops[f"{walk}_lookup_1block"] = lookup_fn(c, hit, SMALL_BS)
    return ops


def p50_us(ops: dict[str, Callable[[], object]], rounds: int, per_round: int) -> dict[str, float]:
    samples: dict[str, list[int]] = {k: [] for k in ops}
    for _ in range(rounds):
        for k, fn in ops.items():
            for _ in range(per_round):
                t0 = time.perf_counter_ns()
                fn()
                samples[k].append(time.perf_counter_ns() - t0)
    return {k: round(statistics.median(v) / 1000.0, 2) for k, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--small-rounds", type=int, default=20)
    ap.add_argument("--no-write", action="store_true")
    a = ap.parse_args()
    if accel.native is None:
        sys.exit(f"ctxcache._native is not active ({accel.reason}): run tools/build_native.py")
    rng = np.random.default_rng(0)
    modes = big_modes(rng)
    samples: dict[str, list[float]] = {k: [] for k in modes}
    for _ in range(a.rounds):
        for k, fn in modes.items():
            samples[k].append(mean_us(fn, a.reps))
    us = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    small = p50_us(small_ops(rng, a.small_rounds * 500 + 10), a.small_rounds, 500)
    base = us["sha256_tuple_list"]
    ratio = {
        "native_int32_vs_sha256": round(base / us["native_xxh3_int32"], 2),
        "native_list_vs_sha256": round(base / us["native_xxh3_list"], 2),
        "python_int32_vs_sha256": round(base / us["python_xxh3_int32"], 2),
        "native_vs_python_int32": round(us["python_xxh3_int32"] / us["native_xxh3_int32"], 2),
        "native_vs_python_list": round(us["python_xxh3_list"] / us["native_xxh3_list"], 2),
        "native_blake3_vs_python_blake3": round(us["python_blake3_int32"] / us["native_blake3_int32"], 2),
        "native_list_over_int32": round(us["native_xxh3_list"] / us["native_xxh3_int32"], 2),
        "store_native_over_python": round(small["native_store_1block"] / small["python_store_1block"], 2),
        "lookup1_native_over_python": round(small["native_lookup_1block"] / small["python_lookup_1block"], 2),
    }
    out = {
        "benchmark": "native_key_walk",
        "tokens": N_TOKENS,
        "block_size": BS,
        "small_block_size": SMALL_BS,
        "us_per_32k_lookup": us,
        "p50_us_one_block": small,
        "ratios": ratio,
        "targets": {
            "32k_vs_sha256>=10": ratio["native_int32_vs_sha256"] >= 10,
            "32k_vs_today>=3": ratio["native_vs_python_int32"] >= 3,
            "list_no_slower_than_numpy": ratio["native_list_over_int32"] <= 1.0,
            "store_p50<=0.5x_today": ratio["store_native_over_python"] <= 0.5,
            "lookup_1block_p50<=0.5x_today": ratio["lookup1_native_over_python"] <= 0.5,
        },
        "native": accel.describe(),
        "python": sys.version.split()[0],
    }
    print(json.dumps(out))
    if not a.no_write:
        OUT.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
