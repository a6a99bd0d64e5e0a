"""ANN libraries for the semantic cache, side by side: hnswlib, usearch, faiss-cpu (HNSW each).

Data (synthetic, not embeddings of text; embedding 10^6 texts with MiniLM on 2 cores takes days):
384-d unit vectors (all-MiniLM-L6-v2's shape) drawn from a seeded mixture of 2,000 clusters on the
sphere: a point is its cluster's random unit centre plus isotropic Gaussian noise (0.06 per
coordinate, norm ~1.2), normalised. Queries are 1,000 held-out points of the same mixture. The
noise is as large as the centre, so the nearest neighbours of a point are spread (mean cosine of the
10th true neighbour is reported per size): a hard case for graph indexes, harder than MiniLM
questions, whose paraphrases sit at cosine ~0.9. Ground truth: exact inner-product top-10 by
brute force (numpy, blocked over the whole set).

Each library builds with the same graph (M=16, i.e. 32 links at level 0, efConstruction=100,
inner product, float32 vectors), in chunks of 50,000 with ``--threads`` threads (default 2), one
index at a time. After its build an index is searched alone ("sequential" rows), saved to disk and
freed (three 10^6 indexes and the data together would pass 7 GB). When all three are built they
are loaded back and searched again interleaved over rounds, so a busy machine slows them alike
(the headline rows; the figure is the median round). Queries run one at a time on one thread: the
semantic cache's access pattern, one lookup per request.

Figures per (library, n, ef_search): recall@10; queries/s by the wall clock and per CPU-second of
the searching thread (``time.thread_time``: what a busy machine's preemptions do not inflate);
build seconds (wall and CPU of all threads); index file bytes (memory: each index holds its float32
vectors and graph in RAM; RSS growth on load is logged too but is unreliable, freed heap is reused). Writes benchmarks/results/ann.json and ann.png after each size, prints one
JSON line. Needs usearch and faiss-cpu (benchmark-only, not project dependencies): see Makefile.
Run: .venv/bin/python benchmarks/semantic/bench_ann.py [--sizes 10000,1000000] [--queries 1000] [--threads 2]
(10^6: ~1.5 GB of vectors, peak RSS 5.3 GB, ~5 GB of indexes on disk, ~35 min of CPU on 2 cores.)
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

DIM, K, M, EF_BUILD, CHUNK = 384, 10, 16, 100, 50_000
EF_SEARCH = (32, 64, 128, 256)
OUT = Path(__file__).resolve().parents[1] / "results"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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


def exact_topk(data: np.ndarray, queries: np.ndarray, k: int = K) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``k`` nearest rows by inner product, exactly (in chunks: 10^6 rows fit in RAM)."""
    best_s = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_i = np.zeros((len(queries), k), dtype=np.int64)
    for lo in range(0, len(data), 100_000):
        s = queries @ data[lo : lo + 100_000].T
        idx = np.argpartition(-s, k, axis=1)[:, :k]
        cand_s = np.concatenate([best_s, np.take_along_axis(s, idx, 1)], axis=1)
        cand_i = np.concatenate([best_i, idx + lo], axis=1)
        top = np.argsort(-cand_s, axis=1)[:, :k]
        best_s, best_i = np.take_along_axis(cand_s, top, 1), np.take_along_axis(cand_i, top, 1)
    return best_i, best_s


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() / 2**20


class Hnswlib:
    name = "hnswlib"

    def start(self, n: int, threads: int) -> None:
        import hnswlib

        self.ix = hnswlib.Index(space="ip", dim=DIM)
        self.ix.init_index(max_elements=n, M=M, ef_construction=EF_BUILD, random_seed=7)
        self.ix.set_num_threads(threads)

    def add(self, lo: int, chunk: np.ndarray) -> None:
        self.ix.add_items(chunk, np.arange(lo, lo + len(chunk)))

    def save(self, path: Path) -> None:
        self.ix.save_index(str(path))

    def load(self, path: Path) -> None:
        import hnswlib

        self.ix = hnswlib.Index(space="ip", dim=DIM)
        self.ix.load_index(str(path))

    def ready(self) -> None:
        self.ix.set_num_threads(1)

    def search(self, q: np.ndarray, ef: int) -> np.ndarray:
        self.ix.set_ef(ef)
        labels, _ = self.ix.knn_query(q[None, :], k=K)
        return labels[0]


class Usearch:
    name = "usearch"

    def start(self, n: int, threads: int) -> None:
        from usearch.index import Index

        self.threads = threads
        self.ix = Index(ndim=DIM, metric="ip", dtype="f32", connectivity=M, expansion_add=EF_BUILD)

    def add(self, lo: int, chunk: np.ndarray) -> None:
        self.ix.add(np.arange(lo, lo + len(chunk)), chunk, threads=self.threads)

    def save(self, path: Path) -> None:
        self.ix.save(str(path))

    def load(self, path: Path) -> None:
        from usearch.index import Index

        ix = Index.restore(str(path))
        assert ix is not None
        self.ix = ix

    def ready(self) -> None:
        pass

    def search(self, q: np.ndarray, ef: int) -> np.ndarray:
        self.ix.expansion_search = ef
        return np.asarray(self.ix.search(q, K, threads=1).keys)


class Faiss:
    name = "faiss"

    def start(self, n: int, threads: int) -> None:
        import faiss

        faiss.omp_set_num_threads(threads)
        self.ix = faiss.IndexHNSWFlat(DIM, M, faiss.METRIC_INNER_PRODUCT)
        self.ix.hnsw.efConstruction = EF_BUILD

    def add(self, lo: int, chunk: np.ndarray) -> None:
        self.ix.add(chunk)

    def save(self, path: Path) -> None:
        import faiss

        faiss.write_index(self.ix, str(path))

    def load(self, path: Path) -> None:
        import faiss

        self.ix = faiss.read_index(str(path))

    def ready(self) -> None:
        import faiss

        faiss.omp_set_num_threads(1)

    def search(self, q: np.ndarray, ef: int) -> np.ndarray:
        self.ix.hnsw.efSearch = ef
        _, idx = self.ix.search(q[None, :], K)
        return np.asarray(idx[0])


def measure(libs: list[Any], queries: np.ndarray, truth: np.ndarray, rounds: int) -> list[dict[str, Any]]:
    rows = []
    for ef in EF_SEARCH:
        secs: dict[str, list[float]] = {lib.name: [] for lib in libs}
        cpu: dict[str, list[float]] = {lib.name: [] for lib in libs}
        found: dict[str, list[np.ndarray]] = {}
        for _ in range(rounds):
            for lib in libs:  # interleaved: each round runs every library in turn
                t0, c0 = time.perf_counter(), time.thread_time()
                got = [lib.search(q, ef) for q in queries]
                secs[lib.name].append(time.perf_counter() - t0)
                cpu[lib.name].append(time.thread_time() - c0)
                found[lib.name] = got
        for lib in libs:
            hits = sum(len(set(g.tolist()) & set(t.tolist())) for g, t in zip(found[lib.name], truth))
            rows.append(
                {
                    "library": lib.name,
                    "ef_search": ef,
                    "recall_at_10": round(hits / (K * len(queries)), 4),
                    "qps": round(len(queries) / float(np.median(secs[lib.name])), 1),
                    "qps_per_cpu_s": round(len(queries) / float(np.median(cpu[lib.name])), 1),
                }
            )
    return rows


def build(lib: Any, data: np.ndarray, threads: int) -> tuple[float, float]:
    """Chunked so a 10^6 build shows progress (and an ETA) in the log. Wall and CPU seconds (all
    threads): on a shared machine the CPU figure is the one that compares."""
    t0, c0 = time.perf_counter(), time.process_time()
    lib.start(len(data), threads)
    for lo in range(0, len(data), CHUNK):
        lib.add(lo, data[lo : lo + CHUNK])
        done, el = min(len(data), lo + CHUNK), time.perf_counter() - t0
        if len(data) > CHUNK:
            log(
                f"build {lib.name} n={len(data):,}: {done:,} ({done / el:,.0f}/s, eta {(len(data) - done) * el / done:,.0f} s)"
            )
    lib.ready()
    return time.perf_counter() - t0, time.process_time() - c0


def save(rows: list[dict[str, Any]]) -> None:
    (OUT / "ann.json").write_text(json.dumps(rows, indent=1))
    plot(rows)


def run_size(
    n: int, nq: int, threads: int, rounds: int, tmp: Path, earlier: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Rows for one size; results are saved after each library, so a cut-short 10^6 run keeps what it measured."""
    data = clustered(n + nq, seed=n)
    data, queries = data[:n], data[n:].copy()
    cached = tmp / f"truth-{n}-{nq}.npz"  # kept in --workdir: a rerun skips the brute force
    if cached.exists():
        truth, sims = np.load(cached)["truth"], np.load(cached)["sims"]
    else:
        log(f"n={n:,}: data ready, exact top-{K} of {nq:,} queries")
        truth, sims = exact_topk(data, queries)
        np.savez(cached, truth=truth, sims=sims)
    libs: list[Any] = [Hnswlib(), Faiss(), Usearch()]  # usearch last: slowest to build
    info: dict[str, dict[str, Any]] = {}
    rows = []
    for lib in libs:  # one build at a time: memory and cores are shared
        secs, cpu = build(lib, data, threads)
        path = tmp / f"{lib.name}-{n}.index"
        lib.save(path)
        info[lib.name] = {
            "build_s": round(secs, 1),
            "build_cpu_s": round(cpu, 1),
            "index_file_mb": round(path.stat().st_size / 2**20, 1),
        }
        rows += [{**r, "mode": "sequential", "n": n, **info[lib.name]} for r in measure([lib], queries, truth, rounds)]
        save(earlier + rows)
        log(f"built {lib.name} n={n:,} in {secs:,.0f} s ({cpu:,.0f} CPU s); searched alone")
        del lib.ix
        gc.collect()
    del data
    gc.collect()
    for lib in libs:  # all three back in memory, then searched interleaved (the headline rows)
        before = rss_mb()
        lib.load(tmp / f"{lib.name}-{n}.index")
        lib.ready()
        info[lib.name]["rss_on_load_mb"] = round(rss_mb() - before, 1)
        (tmp / f"{lib.name}-{n}.index").unlink()
    rows += [{**r, "mode": "interleaved", "n": n} for r in measure(libs, queries, truth, rounds)]
    for lib in libs:
        del lib.ix
    gc.collect()
    stats = {"top1_cos_mean": round(float(sims[:, 0].mean()), 3), "top10_cos_mean": round(float(sims[:, -1].mean()), 3)}
    return [{**r, **info[r["library"]], **stats} for r in rows]


def plot(rows: list[dict[str, Any]]) -> None:
    """Recall vs speed per size: queries/s by the wall clock (top) and per CPU-second (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inter = {r["n"] for r in rows if r["mode"] == "interleaved"}  # else (a cut-short size) searched alone
    rows = [r for r in rows if r["mode"] == ("interleaved" if r["n"] in inter else "sequential")]
    sizes = sorted({r["n"] for r in rows})
    fig, axes = plt.subplots(2, len(sizes), figsize=(6 * len(sizes), 9), squeeze=False)
    for col, n in enumerate(sizes):
        for ax, key, label in ((axes[0][col], "qps", "queries/s, wall (1 thread)"),
                               (axes[1][col], "qps_per_cpu_s", "queries per CPU-second (1 thread)")):  # fmt: skip
            for lib in ("hnswlib", "usearch", "faiss"):
                pts = sorted(
                    (r["recall_at_10"], r[key], r["ef_search"]) for r in rows if r["n"] == n and r["library"] == lib
                )
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib)
                    for x, y, ef in pts:
                        ax.annotate(str(ef), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            mode = "interleaved" if n in inter else "each alone"
            ax.set(title=f"n = {n:,} ({mode})", xlabel="recall@10", ylabel=label)
            ax.set_yscale("log")
            ax.grid(alpha=0.3, which="both")
            ax.legend()
    fig.suptitle("HNSW, 384-d clustered unit vectors, M=16, efConstruction=100; point labels: ef_search")
    fig.tight_layout()
    fig.savefig(OUT / "ann.png", dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,1000000")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="where built indexes wait on disk (default: a temp dir)")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        tmp = args.workdir or stack.enter_context(tempfile.TemporaryDirectory())
        for n in (int(s) for s in args.sizes.split(",")):
            rows += run_size(n, args.queries, args.threads, args.rounds, Path(tmp), rows)
            save(rows)
    best = {}
    for r in rows:
        if r["ef_search"] == 64 and r["mode"] == "interleaved":
            best[f"{r['library']}@{r['n']}"] = {"recall": r["recall_at_10"], "qps": r["qps"], "build_s": r["build_s"]}
    print(json.dumps({"bench": "ann", "ef_search": 64, "results": best}))


if __name__ == "__main__":
    main()
