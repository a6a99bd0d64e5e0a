"""ANN libraries for the semantic cache, side by side: hnswlib, usearch, faiss-cpu (HNSW each).

Data: 384-d unit vectors (all-MiniLM-L6-v2's shape) drawn from a seeded mixture of 2,000
clusters on the sphere; queries are held-out points of the same mixture. Clustered data is the
realistic hard case for graph indexes (uniform random vectors in 384-d have no neighbours worth
the name). Ground truth: exact inner-product top-10 (numpy, blocked).

Each library builds with the same graph degree (M=16) and construction beam (ef=100); a build uses
``--threads`` threads (default 2), one index at a time (the machine is shared). Queries run one at
a time on one thread (the semantic cache's access pattern: one lookup per request), interleaved
across libraries over rounds so a busy machine slows them alike; the figure is the median round.

Figures per (library, n, ef_search): recall@10, queries/s (single-thread, single query), build
seconds, index bytes in RAM (RSS delta during build; a rough figure). Writes
benchmarks/results/ann.json and ann.png, prints one JSON line.

Needs usearch and faiss-cpu (benchmark-only, not project dependencies): ``make bench-semantic``.
Run: .venv/bin/python benchmarks/bench_ann.py [--sizes 10000,100000] [--queries 1000] [--threads 2]
(10^6 vectors: ``--sizes 1000000``; about 1.5 GB of data and tens of minutes of builds on 2 cores.)
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

DIM, K, M, EF_BUILD = 384, 10, 16, 100
EF_SEARCH = (32, 64, 128, 256)
OUT = Path(__file__).parent / "results"


def clustered(n: int, seed: int, clusters: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, DIM), dtype=np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    out = np.empty((n, DIM), dtype=np.float32)
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        which = rng.integers(0, clusters, hi - lo)
        x = centers[which] + 0.06 * rng.standard_normal((hi - lo, DIM), dtype=np.float32)
        out[lo:hi] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def exact_topk(data: np.ndarray, queries: np.ndarray) -> np.ndarray:
    best_s = np.full((len(queries), K), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), K), dtype=np.int64)
    for lo in range(0, len(data), 200_000):
        s = queries @ data[lo : lo + 200_000].T
        idx = np.argpartition(-s, K, axis=1)[:, :K]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, idx, 1)], axis=1)
        cand_i = np.concatenate([best_i, idx + lo], axis=1)
        top = np.argsort(-cand_s, axis=1)[:, :K]
        best_s, best_i = np.take_along_axis(cand_s, top, 1), np.take_along_axis(cand_i, top, 1)
    return best_i


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


class Hnswlib:
    name = "hnswlib"

    def build(self, data: np.ndarray, threads: int) -> None:
        import hnswlib

        self.ix = hnswlib.Index(space="ip", dim=DIM)
        self.ix.init_index(max_elements=len(data), M=M, ef_construction=EF_BUILD, random_seed=7)
        self.ix.set_num_threads(threads)
        self.ix.add_items(data, np.arange(len(data)))
        self.ix.set_num_threads(1)

    def search(self, q: np.ndarray, ef: int) -> np.ndarray:
        self.ix.set_ef(ef)
        labels, _ = self.ix.knn_query(q[None, :], k=K)
        return labels[0]


class Usearch:
    name = "usearch"

    def build(self, data: np.ndarray, threads: int) -> None:
        from usearch.index import Index

        self.ix = Index(ndim=DIM, metric="ip", dtype="f32", connectivity=M, expansion_add=EF_BUILD)
        self.ix.add(np.arange(len(data)), data, threads=threads)

    def search(self, q: np.ndarray, ef: int) -> np.ndarray:
        self.ix.expansion_search = ef
        return np.asarray(self.ix.search(q, K, threads=1).keys)


class Faiss:
    name = "faiss"

    def build(self, data: np.ndarray, threads: int) -> None:
        import faiss

        faiss.omp_set_num_threads(threads)
        self.ix = faiss.IndexHNSWFlat(DIM, M, faiss.METRIC_INNER_PRODUCT)
        self.ix.hnsw.efConstruction = EF_BUILD
        self.ix.add(data)
        faiss.omp_set_num_threads(1)

    def search(self, q: np.ndarray, ef: int) -> np.ndarray:
        self.ix.hnsw.efSearch = ef
        _, idx = self.ix.search(q[None, :], K)
        return np.asarray(idx[0])


def measure(libs: list[Any], queries: np.ndarray, truth: np.ndarray, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for ef in EF_SEARCH:
        secs: dict[str, list[float]] = {lib.name: [] for lib in libs}
        found: dict[str, list[np.ndarray]] = {}
        for _ in range(rounds):
            for lib in libs:  # interleaved: each round runs every library in turn
                t0 = time.perf_counter()
                got = [lib.search(q, ef) for q in queries]
                secs[lib.name].append(time.perf_counter() - t0)
                found[lib.name] = got
        for lib in libs:
            hits = sum(len(set(g.tolist()) & set(t.tolist())) for g, t in zip(found[lib.name], truth))
            rows.append(
                {
                    "library": lib.name,
                    "ef_search": ef,
                    "recall_at_10": round(hits / (K * len(queries)), 4),
                    "qps": round(len(queries) / float(np.median(secs[lib.name])), 1),
                }
            )
    return rows


def run_size(n: int, nq: int, threads: int, rounds: int, progress: Progress) -> list[dict[str, Any]]:
    data = clustered(n + nq, seed=n)
    data, queries = data[:n], data[n:]
    truth = exact_topk(data, queries)
    libs: list[Any] = [Hnswlib(), Usearch(), Faiss()]
    builds = {}
    task = progress.add_task(f"build n={n:,}", total=len(libs))
    for lib in libs:  # one build at a time: memory and cores are shared
        gc.collect()
        before = rss_mb()
        t0 = time.perf_counter()
        lib.build(data, threads)
        builds[lib.name] = {
            "build_s": round(time.perf_counter() - t0, 1),
            "rss_delta_mb_rough": round(rss_mb() - before, 1),
        }
        progress.advance(task)
    rows = measure(libs, queries, truth, rounds)
    for r in rows:
        r.update(n=n, **builds[r["library"]])
    return rows


def plot(rows: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["n"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5), squeeze=False)
    for ax, n in zip(axes[0], sizes):
        for lib in ("hnswlib", "usearch", "faiss"):
            pts = sorted((r["recall_at_10"], r["qps"]) for r in rows if r["n"] == n and r["library"] == lib)
            if pts:
                ax.plot(*zip(*pts), marker="o", label=lib)
        ax.set(title=f"n = {n:,} (384-d, M=16, efC=100)", xlabel="recall@10", ylabel="queries/s (1 thread)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "ann.png", dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    with Progress() as progress:
        for n in (int(s) for s in args.sizes.split(",")):
            rows += run_size(n, args.queries, args.threads, args.rounds, progress)
            (OUT / "ann.json").write_text(json.dumps(rows, indent=1))
    plot(rows)
    best = {}
    for r in rows:
        if r["ef_search"] == 64:
            best[f"{r['library']}@{r['n']}"] = {"recall": r["recall_at_10"], "qps": r["qps"], "build_s": r["build_s"]}
    print(json.dumps({"bench": "ann", "ef_search": 64, "results": best}))


if __name__ == "__main__":
    main()
