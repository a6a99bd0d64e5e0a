"""Anomaly clustering of metric windows with DBSCAN.

Each window is a point of FEATURES (hit ratio, eviction rate, eviction entropy, age skew, load
latency). Features are put on one scale with robust z-scores (median and MAD, the MAD floored at
5 % of the median so a feature that barely moves does not turn noise into outliers). DBSCAN then
groups windows that behave alike; a window is anomalous when it is DBSCAN noise or sits in a
small cluster (a disturbance lasting several windows forms its own little cluster), and at least
one of its features is ``z_min`` robust deviations off. The feature with the largest |z| is the one
that drove it. Warm-up windows (before the cache first evicted) are not judged: a filling cache
is supposed to look different.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CtxCacheError
from .replay import FEATURES


class AnalyzeError(CtxCacheError):
    """Unusable input to ``analyze``."""


@dataclass(frozen=True)
class Flag:
    t: float
    window: int
    feature: str  # the feature that drove it
    z: float
    value: float
    median: float
    cluster: int  # DBSCAN label: -1 = noise

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Analysis:
    flags: list[Flag]
    judged: int
    warmup: int
    clusters: int
    features: tuple[str, ...]


def robust_z(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column-wise robust z-scores; returns (z, medians)."""
    med = np.median(x, axis=0)
    mad = 1.4826 * np.median(np.abs(x - med), axis=0)
    scale = np.maximum(mad, np.maximum(0.05 * np.abs(med), 1e-9))
    return (x - med) / scale, med


def _warmup(rows: Sequence[dict[str, Any]]) -> int:
    for i, r in enumerate(rows):
        if float(r.get("eviction_rate", 0.0)) > 0:
            return i + 1  # the first evicting window is still partly a filling cache
    return len(rows)


def analyze(
    rows: Sequence[dict[str, Any]],
    features: Sequence[str] = FEATURES,
    *,
    eps: float = 2.5,
    min_samples: int = 4,
    small_cluster: float = 0.1,
    z_min: float = 4.0,
    skip_warmup: bool = True,
) -> Analysis:
    """Flag anomalous windows; ``rows`` are dicts holding every name in ``features``."""
    from sklearn.cluster import DBSCAN

    missing = [f for f in features if rows and f not in rows[0]]
    if missing:
        raise AnalyzeError(f"windows lack feature(s) {', '.join(missing)}; they have {', '.join(sorted(rows[0]))}")
    start = _warmup(rows) if skip_warmup else 0
    judged = list(rows[start:])
    if len(judged) < 2 * min_samples:
        raise AnalyzeError(
            f"{len(judged)} windows after warm-up ({start} skipped): need at least {2 * min_samples} to cluster; "
            "use a longer log or shorter windows"
        )
    try:
        x = np.array([[float(r[f]) for f in features] for r in judged])
    except (TypeError, ValueError) as exc:
        raise AnalyzeError(f"a window has a non-numeric feature: {exc}") from None
    if not np.isfinite(x).all():
        raise AnalyzeError("a window has a NaN or infinite feature")
    z, med = robust_z(x)
    labels = DBSCAN(eps=eps, min_samples=min_samples).fit(z).labels_
    sizes = {int(lab): int((labels == lab).sum()) for lab in set(labels.tolist())}
    flags = []
    for i, lab in enumerate(labels.tolist()):
        outlying = lab == -1 or sizes[lab] < small_cluster * len(judged)
        j = int(np.argmax(np.abs(z[i])))
        if outlying and abs(z[i, j]) >= z_min:
            t = float(judged[i].get("t", start + i))
            flags.append(Flag(t, start + i, features[j], float(z[i, j]), float(x[i, j]), float(med[j]), int(lab)))
    n_clusters = len({lab for lab in labels.tolist() if lab != -1})
    return Analysis(flags, len(judged), start, n_clusters, tuple(features))


def read_windows(path: str | Path) -> list[dict[str, Any]]:
    """A metrics log: JSON lines; rows with a ``hit_ratio`` field are windows (other lines are skipped)."""
    p = Path(path)
    if not p.is_file():
        raise AnalyzeError(f"metrics log not found: {p}")
    rows: list[dict[str, Any]] = []
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise AnalyzeError(f"{p}:{n}: not JSON ({exc.msg})") from None
            if isinstance(rec, dict) and "hit_ratio" in rec:
                rows.append(rec)
    if not rows:
        raise AnalyzeError(f"{p}: no window records (JSON lines with a hit_ratio field)")
    return rows


def write_windows(rows: Iterable[dict[str, Any]], path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
