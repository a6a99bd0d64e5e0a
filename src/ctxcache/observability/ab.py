"""A/B policy groups: sticky assignment by hash, and the per-group report with a significance test.

A session (today: the API key's tenant, the server's notion of a user) lands in group ``b`` when
``blake2b(salt + id)`` maps below ``fraction``: the same id always gets the same group, and
changing the salt reshuffles everyone. Group ``b`` is served by its own cache built from the
alternative config (another policy or tier setup); group ``a`` by the main one.

The report compares groups on token hit ratio (two-proportion z-test over requests' hit and
prompt tokens is wrong: tokens within a request are not independent; we test per-request hit
ratios with Welch's t-test instead) and TTFT p50/p95 (Mann-Whitney U on per-request TTFTs).
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

GROUPS = ("a", "b")


@dataclass(frozen=True)
class ABConfig:
    fraction: float = 0.0  # share of sessions in group b; 0 = no experiment
    salt: str = "ctxcache-ab"
    cache: Mapping[str, Any] = field(default_factory=dict)  # group b's cache config (ContextCache.from_config)

    def __post_init__(self) -> None:
        if not isinstance(self.fraction, (int, float)) or not 0.0 <= self.fraction <= 1.0:
            raise ConfigError(f"ab.fraction must be a number in [0, 1], got {self.fraction!r}")
        if self.fraction > 0 and not self.cache:
            raise ConfigError("ab.fraction > 0 needs ab.cache: the alternative cache config for group b")


def group_of(session: str, fraction: float, salt: str = "ctxcache-ab") -> str:
    if fraction <= 0.0:
        return "a"
    h = hashlib.blake2b((salt + "\0" + session).encode(), digest_size=8).digest()
    return "b" if int.from_bytes(h, "big") / 2**64 < fraction else "a"


def _pct(xs: Sequence[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class GroupStats:
    group: str
    requests: int
    hit_ratio: float  # token-weighted
    ttft_p50_s: float
    ttft_p95_s: float
    per_request_hit: list[float]
    ttfts: list[float]


def group_stats(records: Iterable[Mapping[str, Any]]) -> dict[str, GroupStats]:
    by: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by.setdefault(str(r["ab_group"]), []).append(r)
    out = {}
    for g, rs in sorted(by.items()):
        prompt = sum(int(r["prompt_tokens"]) for r in rs)
        hit = sum(int(r["cached_tokens"]) for r in rs)
        per = [int(r["cached_tokens"]) / int(r["prompt_tokens"]) for r in rs if int(r["prompt_tokens"]) > 0]
        tt = [float(r["ttft_s"]) for r in rs if r.get("ttft_s") is not None]
        out[g] = GroupStats(g, len(rs), hit / prompt if prompt else 0.0, _pct(tt, 0.5), _pct(tt, 0.95), per, tt)
    return out


@dataclass(frozen=True)
class Comparison:
    hit_ratio_p: float  # Welch t-test on per-request hit ratios
    ttft_p: float  # Mann-Whitney U on TTFTs
    alpha: float

    @property
    def hit_ratio_significant(self) -> bool:
        return self.hit_ratio_p < self.alpha

    @property
    def ttft_significant(self) -> bool:
        return self.ttft_p < self.alpha


def compare(a: GroupStats, b: GroupStats, alpha: float = 0.05) -> Comparison:
    from scipy import stats

    def p_or_nan(fn: Any, x: Sequence[float], y: Sequence[float]) -> float:
        if len(x) < 2 or len(y) < 2:
            return float("nan")
        if len(set(x)) == 1 and set(x) == set(y):
            return 1.0  # identical constant samples: no difference (the tests divide by zero)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # near-constant samples: scipy warns, p is still usable
            p = float(fn(x, y).pvalue)
        return 1.0 if math.isnan(p) else p  # identical constant samples: no difference

    hp = p_or_nan(lambda x, y: stats.ttest_ind(x, y, equal_var=False), a.per_request_hit, b.per_request_hit)
    tp = p_or_nan(lambda x, y: stats.mannwhitneyu(x, y, alternative="two-sided"), a.ttfts, b.ttfts)
    return Comparison(hp, tp, alpha)


def read_requests(path: str | Path) -> list[dict[str, Any]]:
    """Request records from a JSON log (lines with msg "request"), skipping other lines."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"request log not found: {p}")
    out = []
    with p.open(encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a text-format or truncated line
            if isinstance(rec, dict) and rec.get("msg") == "request" and "ab_group" in rec:
                out.append(rec)
    if not out:
        raise ConfigError(f"{p}: no request records (run the server with CTXCACHE_LOG_JSON=1 and log to a file)")
    return out
