"""Vector indexes for the semantic cache: exact (numpy) for small partitions, HNSW (hnswlib) for large.

Every index holds unit vectors under integer labels and answers inner-product top-k (cosine on unit
vectors). ``AutoIndex`` is what the cache uses per partition: exact search while the partition is
small (exact and faster below a few thousand vectors), switched once to HNSW when it grows past
``switch_at``. hnswlib was picked over usearch and faiss-cpu by benchmarks/semantic/bench_ann.py (figures in
docs/semantic-cache.md, measured at 10^4 vectors): recall and queries/s level with faiss, the fastest
build, the least memory, in-place deletes (``mark_deleted`` + ``replace_deleted``), the smallest
dependency.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from ..errors import ConfigError, MissingDependencyError

EF_FLOOR, EF_FLOOR_UNTIL, EF_CAP = 64, 4096, 512


class VectorIndex(Protocol):
    dim: int

    def add(self, label: int, vector: np.ndarray) -> None: ...
    def remove(self, label: int) -> None: ...
    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]: ...
    def __len__(self) -> int: ...
    def nbytes(self) -> int: ...


def _check(vector: np.ndarray, dim: int) -> np.ndarray:
    v = np.asarray(vector, dtype=np.float32).reshape(-1)
    if v.shape[0] != dim:
        raise ConfigError(f"vector has {v.shape[0]} dimensions, the index {dim}")
    return v


class ExactIndex:
    """Brute-force inner product over a growable float32 (or int8) matrix; O(1) delete by swap."""

    def __init__(self, dim: int, *, int8: bool = False) -> None:
        self.dim, self.int8 = dim, int8
        self._rows = np.zeros((16, dim), dtype=np.int8 if int8 else np.float32)
        self._labels: list[int] = []
        self._pos: dict[int, int] = {}

    def add(self, label: int, vector: np.ndarray) -> None:
        v = _check(vector, self.dim)
        if label in self._pos:
            self.remove(label)
        n = len(self._labels)
        if n == len(self._rows):
            self._rows = np.concatenate([self._rows, np.zeros_like(self._rows)])
        # int8: unit vectors scaled by 127; a score is then the cosine up to ~1e-2.
        self._rows[n] = np.clip(np.rint(v * 127), -127, 127) if self.int8 else v
        self._labels.append(label)
        self._pos[label] = n

    def remove(self, label: int) -> None:
        i = self._pos.pop(label, None)
        if i is None:
            return
        last = len(self._labels) - 1
        if i != last:
            self._rows[i] = self._rows[last]
            self._labels[i] = self._labels[last]
            self._pos[self._labels[i]] = i
        self._labels.pop()

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        n = len(self._labels)
        if n == 0:
            return []
        v = _check(vector, self.dim)
        rows = self._rows[:n]
        scores = (rows.astype(np.float32) @ v) / 127.0 if self.int8 else rows @ v
        k = min(k, n)
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        top = top[np.argsort(-scores[top])]
        return [(self._labels[i], float(scores[i])) for i in top]

    def items(self) -> list[tuple[int, np.ndarray]]:
        rows = self._rows[: len(self._labels)]
        vecs = rows.astype(np.float32) / 127.0 if self.int8 else rows
        return list(zip(self._labels, vecs))

    def __len__(self) -> int:
        return len(self._labels)

    def nbytes(self) -> int:
        return int(self._rows.nbytes)


def scaled_ef(n: int) -> int:
    """ef_search for an HNSW partition of ``n`` entries: 64 up to 4,096 (where ``AutoIndex`` switches
    to HNSW), then x2 per x4 entries (as sqrt(n)), at most 512. Why: at a fixed ef the share of
    lookups whose nearest entry the graph misses grows with the partition (ef 64 missed a paraphrased
    entry for 4-5 % of near-duplicate queries at 10^5 entries, 26 % at 10^6); each doubling of ef cut
    that, at well under the ~10 ms a lookup spends embedding (benchmarks/semantic/bench_ann_scale.py, figures
    and the cap's reason in docs/semantic-cache.md)."""
    return min(EF_CAP, max(EF_FLOOR, round(EF_FLOOR * math.sqrt(n / EF_FLOOR_UNTIL))))


class HnswIndex:
    """hnswlib HNSW (inner product) with in-place deletes and doubling capacity; ef_search is
    ``scaled_ef`` of the live entries unless fixed."""

    def __init__(self, dim: int, *, m: int = 16, ef_construction: int = 100, ef_search: int | None = None) -> None:
        try:
            import hnswlib
        except ImportError as exc:  # pragma: no cover - the semantic extra is missing
            raise MissingDependencyError("HNSW search needs 'hnswlib' (extra 'semantic')") from exc
        self.dim, self.m = dim, m
        self._ix: Any = hnswlib.Index(space="ip", dim=dim)
        self._ix.init_index(max_elements=1024, M=m, ef_construction=ef_construction, random_seed=7,
                            allow_replace_deleted=True)  # fmt: skip
        self.ef_search = ef_search  # None: scaled_ef(len(self)) at each search
        self._ix.set_num_threads(1)  # one query per request; the cache's callers supply parallelism
        self._live: set[int] = set()
        self._deleted = 0

    @property
    def ef_search(self) -> int:
        """The ef a search of ``k`` <= ef neighbours uses now: fixed, or scaled to the live entries."""
        return self._ef_fixed if self._ef_fixed is not None else scaled_ef(len(self._live))

    @ef_search.setter
    def ef_search(self, ef: int | None) -> None:
        if ef is not None and (isinstance(ef, bool) or not isinstance(ef, int) or ef < 1):
            raise ConfigError(f"ef_search must be a positive integer or None (scaled to size), got {ef!r}")
        self._ef_fixed = ef

    def add(self, label: int, vector: np.ndarray) -> None:
        v = _check(vector, self.dim)
        if label in self._live:
            self.remove(label)
        if self._deleted == 0 and self._ix.get_current_count() >= self._ix.get_max_elements():
            self._ix.resize_index(2 * self._ix.get_max_elements())
        reuse = self._deleted > 0
        self._ix.add_items(v[None, :], np.array([label]), replace_deleted=reuse)
        self._deleted -= int(reuse)
        self._live.add(label)

    def remove(self, label: int) -> None:
        if label in self._live:
            self._live.discard(label)
            self._ix.mark_deleted(label)
            self._deleted += 1

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        if not self._live:
            return []
        v = _check(vector, self.dim)
        k = min(k, len(self._live))
        ef = max(k, self.ef_search)  # hnswlib needs ef >= k
        if ef != self._ix.ef:
            self._ix.set_ef(ef)
        labels, dists = self._ix.knn_query(v[None, :], k=k)
        return [(int(lab), 1.0 - float(d)) for lab, d in zip(labels[0], dists[0])]  # ip distance = 1 - <a, b>

    def __len__(self) -> int:
        return len(self._live)

    def nbytes(self) -> int:
        # hnswlib's layout: per element the vector, level-0 links (2M ints + count) and a label.
        per = self.dim * 4 + (2 * self.m + 1) * 4 + 8
        return int(self._ix.get_max_elements() * per)


class AutoIndex:
    """Exact while small, HNSW from ``switch_at`` vectors on (rebuilt once from the exact rows)."""

    def __init__(self, dim: int, *, switch_at: int = 4096, int8: bool = False) -> None:
        self.dim, self.switch_at = dim, switch_at
        self._ix: ExactIndex | HnswIndex = ExactIndex(dim, int8=int8)

    @property
    def kind(self) -> str:
        return "hnsw" if isinstance(self._ix, HnswIndex) else "exact"

    def add(self, label: int, vector: np.ndarray) -> None:
        self._ix.add(label, vector)
        if isinstance(self._ix, ExactIndex) and len(self._ix) >= self.switch_at:
            hnsw = HnswIndex(self.dim)
            for lab, vec in self._ix.items():
                hnsw.add(lab, vec)
            self._ix = hnsw

    def remove(self, label: int) -> None:
        self._ix.remove(label)

    def search(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        return self._ix.search(vector, k)

    def __len__(self) -> int:
        return len(self._ix)

    def nbytes(self) -> int:
        return self._ix.nbytes()
