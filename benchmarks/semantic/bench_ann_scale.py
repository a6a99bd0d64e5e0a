"""Does the semantic cache's HNSW index keep recall as a partition grows to 10^6 entries?

Measures the project's own ``ctxcache.semantic.HnswIndex`` (hnswlib, M=16, efConstruction=100, one
vector per ``add`` on one thread, as ``AutoIndex`` fills it in the cache) against exact search, per
partition size and ef_search. (benchmarks/semantic/bench_ann.py compares libraries on a hard mixture; this
script answers the cache's question: is the entry a lookup should hit among its candidates?)

Vectors (synthetic: embedding 10^6 texts with MiniLM on 2 cores takes days): 384-d unit vectors
shaped like sentence embeddings: a shared direction (sentence embeddings are anisotropic: unrelated
texts sit at cosine ~0.1), a topic centre and a subtopic centre, both Zipf-popular (s=1.1), plus
noise; weights give expected cosine ~0.1 between unrelated entries, ~0.4 within a topic and ~0.65
within a subtopic, so popular subtopics are large dense blobs (many wordings of one question). The
noise is isotropic (``--rank 0``: entries of a blob near-equidistant, the hard case for a graph
index) or, with ``--rank R``, 90 % (of its squared norm) in an R-dimensional subspace per topic:
entries vary along few directions, as embeddings of related texts do (low intrinsic dimension).
Queries, 1,000 of each kind:
- ``near_dup``: a stored entry (drawn uniformly over entries, so popular topics are asked more)
  rotated to cosine uniform in [0.86, 0.98] with it: a paraphrase the cache should serve
  (0.86 is the default threshold);
- ``fresh``: new draws from the mixture (nearest entry at cosine ~0.65-0.75: a miss for the cache,
  shown as the graph's recall on a generic query).
Ground truth: exact inner-product top-8 over all n (numpy, blocked). Figures per (n, ef_search,
kind): recall@1 (the index's best is the exact best), recall@8 (8 = ``cache.CANDIDATES``, the k the
cache asks for), hit recall (of queries whose exact best is >= 0.86, the share whose best is among
the index's 8: the cache then still serves it), latency per query (wall p50/p99 and CPU, one thread,
ef values interleaved over rounds so machine load hits them alike), beside exact search (numpy
matrix-vector, what ``ExactIndex.search`` does) in the same run. Per size: build seconds (wall, CPU),
the index's own ``nbytes()`` and the process's RSS growth over the build.
``--ef auto`` measures the index's default (``scaled_ef`` of the size) beside the fixed values.
Writes benchmarks/results/<--out>.json and .png after each size, prints one JSON line. Run:
.venv/bin/python benchmarks/semantic/bench_ann_scale.py [--sizes 100000,1000000] [--ef 64,128,256,512] [--rank 16]
(10^6: ~10 min of one core to build (21 min wall on a busy 2-core machine), peak RSS 4 GB;
--workdir keeps built graphs, 1.7 GB at 10^6, and a rerun loads them instead of building.)
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from bench_ann import exact_topk, rss_mb  # the same exact search and RSS reading as the library comparison

from ctxcache.semantic import HnswIndex
from ctxcache.semantic.cache import CANDIDATES, DEFAULT_THRESHOLD

DIM, TOPICS, SUBS, ZIPF = 384, 1000, 50, 1.1
W_SHARED, W_TOPIC, W_SUB = 0.10, 0.30, 0.25  # the rest (0.35) is per-entry noise; weights of squared norm
OUT = Path(__file__).resolve().parents[1] / "results"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def unit(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / np.linalg.norm(x, axis=-1, keepdims=True), dtype=np.float32)


def zipf(k: int) -> np.ndarray:
    p = 1.0 / np.arange(1, k + 1) ** ZIPF
    return np.asarray(p / p.sum())


class Mixture:
    """Seeded embedding-like mixture; ``draw`` returns unit vectors."""

    def __init__(self, seed: int, rank: int) -> None:
        self.rng, self.rank = np.random.default_rng(seed), rank
        self.shared = unit(self.rng.standard_normal(DIM))
        self.topics = unit(self.rng.standard_normal((TOPICS, DIM)))
        self.subs = unit(self.rng.standard_normal((TOPICS, SUBS, DIM)))
        self.p_topic, self.p_sub = zipf(TOPICS), zipf(SUBS)
        if rank:  # an orthonormal basis per topic: the directions its entries vary along
            self.basis = np.stack([np.linalg.qr(self.rng.standard_normal((DIM, rank)))[0].T for _ in range(TOPICS)])

    def noise(self, t: np.ndarray) -> np.ndarray:
        """Unit noise: isotropic (``rank`` 0), or 0.9 of it (in squared norm) in the topic's subspace."""
        iso = unit(self.rng.standard_normal((len(t), DIM), dtype=np.float32))
        if not self.rank:
            return iso
        low = np.empty_like(iso)
        coef = unit(self.rng.standard_normal((len(t), self.rank), dtype=np.float32))
        for topic in np.unique(t):
            at = t == topic
            low[at] = coef[at] @ self.basis[topic]
        return unit(np.sqrt(0.9) * low + np.sqrt(0.1) * iso)

    def draw(self, n: int) -> np.ndarray:
        out = np.empty((n, DIM), dtype=np.float32)
        for lo in range(0, n, 100_000):
            m = min(n, lo + 100_000) - lo
            t = self.rng.choice(TOPICS, m, p=self.p_topic)
            s = self.rng.choice(SUBS, m, p=self.p_sub)
            noise = self.noise(t)
            x = (np.sqrt(W_SHARED) * self.shared + np.sqrt(W_TOPIC) * self.topics[t] + np.sqrt(W_SUB) * self.subs[t, s]
                 + np.sqrt(1 - W_SHARED - W_TOPIC - W_SUB) * noise)  # fmt: skip
            out[lo : lo + m] = unit(x)
        return out

    def near(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row of ``x`` rotated to a cosine uniform in [0.86, 0.98] with itself."""
        cos = self.rng.uniform(0.86, 0.98, len(x)).astype(np.float32)
        u = self.rng.standard_normal(x.shape, dtype=np.float32)
        u = unit(u - (u * x).sum(1, keepdims=True) * x)  # orthogonal to x
        return unit(cos[:, None] * x + np.sqrt(1 - cos**2)[:, None] * u), cos


def build(data: np.ndarray, path: Path | None) -> tuple[HnswIndex, dict[str, Any]]:
    """One ``add`` per entry, as the cache inserts; a saved graph (``--workdir``) is loaded instead."""
    ix, rss0 = HnswIndex(DIM), rss_mb()
    if path is not None and path.exists():
        ix._ix.load_index(str(path), max_elements=len(data), allow_replace_deleted=True)
        ix._live = set(range(len(data)))
        log(f"n={len(data):,}: loaded {path}")
        return ix, {"build_s": None, "build_cpu_s": None, "nbytes_mb": round(ix.nbytes() / 2**20, 1)}
    t0, c0 = time.perf_counter(), time.process_time()
    for i, v in enumerate(data):
        ix.add(i, v)
        if (i + 1) % 50_000 == 0:
            el = time.perf_counter() - t0
            log(
                f"build n={len(data):,}: {i + 1:,} ({(i + 1) / el:,.0f}/s, eta {(len(data) - i - 1) * el / (i + 1):,.0f} s)"
            )
    info = {"build_s": round(time.perf_counter() - t0, 1), "build_cpu_s": round(time.process_time() - c0, 1),
            "nbytes_mb": round(ix.nbytes() / 2**20, 1), "build_rss_growth_mb": round(rss_mb() - rss0, 1)}  # fmt: skip
    if path is not None:
        ix._ix.save_index(str(path))
    return ix, info


def timed(fn: Any, queries: np.ndarray) -> tuple[list[Any], np.ndarray, float]:
    got, ns = [], np.empty(len(queries))
    c0 = time.thread_time()
    for j, q in enumerate(queries):
        t = time.perf_counter_ns()
        got.append(fn(q))
        ns[j] = time.perf_counter_ns() - t
    return got, ns / 1e6, (time.thread_time() - c0) * 1e3 / len(queries)


def scores(got: list[list[tuple[int, float]]], truth: np.ndarray, sims: np.ndarray) -> dict[str, Any]:
    labels = [[lab for lab, _ in g] for g in got]
    r1 = np.mean([bool(g) and g[0] == t[0] for g, t in zip(labels, truth)])
    rk = np.mean([len(set(g) & set(t.tolist())) / len(t) for g, t in zip(labels, truth)])
    hit = [t[0] in g for g, t, s in zip(labels, truth, sims) if s[0] >= DEFAULT_THRESHOLD]
    return {"recall_at_1": round(float(r1), 4), f"recall_at_{CANDIDATES}": round(float(rk), 4),
            "hit_recall": round(float(np.mean(hit)), 4) if hit else None, "hit_queries": len(hit),
            "missed_top1": int(round((1 - r1) * len(truth)))}  # fmt: skip


def measure(ix: HnswIndex, qsets: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]], efs: list[int],
            rounds: int) -> list[dict[str, Any]]:  # fmt: skip
    wall: dict[tuple[int, str], list[np.ndarray]] = {}
    cpu: dict[tuple[int, str], list[float]] = {}
    found: dict[tuple[int, str], list[Any]] = {}
    for r in range(rounds):
        for ef in efs if r % 2 == 0 else efs[::-1]:  # interleaved, alternating order
            ix.ef_search = ef or None  # 0: the index's own rule, scaled_ef(n)
            for kind, (qs, _, _) in qsets.items():
                got, ms, c = timed(lambda q: ix.search(q, CANDIDATES), qs)
                wall.setdefault((ef, kind), []).append(ms)
                cpu.setdefault((ef, kind), []).append(c)
                found[(ef, kind)] = got
    rows = []
    for (ef, kind), got in found.items():
        ms = np.concatenate(wall[(ef, kind)])
        ix.ef_search = ef or None
        rows.append({"ef_search": ix.ef_search, "ef_rule": "fixed" if ef else "scaled_ef", "queries": kind, **scores(got, qsets[kind][1], qsets[kind][2]),
                     "p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
                     "cpu_ms": round(float(np.median(cpu[(ef, kind)])), 3)})  # fmt: skip
    return sorted(rows, key=lambda r: (r["queries"], r["ef_rule"], r["ef_search"]))


def exact_latency(data: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    def one(q: np.ndarray) -> np.ndarray:
        s = data @ q
        top = np.argpartition(-s, CANDIDATES)[:CANDIDATES]
        return top[np.argsort(-s[top])]

    _, ms, c = timed(one, queries)
    return {"exact_p50_ms": round(float(np.percentile(ms, 50)), 2), "exact_cpu_ms": round(c, 2)}


def run_size(n: int, nq: int, efs: list[int], rounds: int, rank: int, workdir: Path | None) -> list[dict[str, Any]]:
    mix = Mixture(seed=n, rank=rank)
    data = mix.draw(n)
    picked = mix.rng.choice(n, nq, replace=False)
    near, cos = mix.near(data[picked])
    qsets_raw = {"near_dup": near, "fresh": mix.draw(nq)}
    log(f"n={n:,}: data ready ({data.nbytes / 2**20:,.0f} MB), exact top-{CANDIDATES} of {2 * nq:,} queries")
    qsets = {k: (q, *exact_topk(data, q, CANDIDATES)) for k, q in qsets_raw.items()}
    stats = {"near_dup_is_source": round(float(np.mean(qsets["near_dup"][1][:, 0] == picked)), 4),
             "near_dup_top1_cos_mean": round(float(qsets["near_dup"][2][:, 0].mean()), 3),
             "fresh_top1_cos_mean": round(float(qsets["fresh"][2][:, 0].mean()), 3),
             "random_pair_cos_mean": round(float((data[:1000] * data[1000:2000]).sum(1).mean()), 3)}  # fmt: skip
    ix, info = build(data, None if workdir is None else workdir / f"hnsw-{n}-r{rank}.bin")
    log(f"n={n:,}: built {info}; searching")
    info |= exact_latency(data, qsets_raw["near_dup"][: min(nq, 200)])
    del data
    rows = measure(ix, qsets, efs, rounds)
    info["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return [{"n": n, "noise_rank": rank, **r, **info, **stats} for r in rows]


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    keys = (
        ("recall_at_1", "recall@1"),
        (f"recall_at_{CANDIDATES}", f"recall@{CANDIDATES}"),
        ("p50_ms", "p50 ms/query"),
    )
    rows = [r for r in rows if r.get("ef_rule", "fixed") == "fixed"]
    for ax, (key, label) in zip(axes, keys):
        for n in sorted({r["n"] for r in rows}):
            for kind, style in (("near_dup", "-"), ("fresh", "--")):
                pts = sorted((r["ef_search"], r[key]) for r in rows if r["n"] == n and r["queries"] == kind)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", label=f"n={n:,} {kind}")
        ax.set(xscale="log", xlabel="ef_search", ylabel=label, title=label)
        ax.minorticks_off()
        ax.set_xticks(sorted({r["ef_search"] for r in rows}), [str(e) for e in sorted({r["ef_search"] for r in rows})])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    rank = rows[0].get("noise_rank", 0)
    noise = f"rank-{rank} within-topic noise" if rank else "isotropic noise"
    fig.suptitle(f"ctxcache HnswIndex (M=16, efConstruction=100) vs exact search, 384-d Zipf mixture, {noise}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--ef", default="64,128,256,512", help="values; 'auto': the index's default rule")
    ap.add_argument("--queries", type=int, default=1000, help="per kind (near_dup, fresh)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="keep built graphs here; a rerun loads them")
    ap.add_argument("--rank", type=int, default=0, help="entries vary in a rank-R subspace per topic (0: isotropic)")
    ap.add_argument("--out", default="ann_scale.json")
    args = ap.parse_args()
    efs = [0 if e == "auto" else int(e) for e in args.ef.split(",")]
    workdir = None if args.workdir is None else Path(args.workdir)
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for n in (int(s) for s in args.sizes.split(",")):
        rows += run_size(n, args.queries, efs, args.rounds, args.rank, workdir)
        (OUT / args.out).write_text(json.dumps(rows, indent=1))
        plot(rows, (OUT / args.out).with_suffix(".png"))
    summary = {f"{r['queries']}@{r['n']}/ef{r['ef_search']}{'(auto)' if r.get('ef_rule') == 'scaled_ef' else ''}": [r["recall_at_1"], r[f"recall_at_{CANDIDATES}"], r["p50_ms"]]
               for r in rows}  # fmt: skip
    print(json.dumps({"bench": "ann_scale", "fields": ["recall@1", f"recall@{CANDIDATES}", "p50_ms"], **summary}))


if __name__ == "__main__":
    main()
