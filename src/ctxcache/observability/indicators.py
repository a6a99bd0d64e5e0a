"""The three health indicators, over sliding windows of an injected clock.

- hit-rate slope: least-squares slope of the token hit ratio (in %) against time (in minutes),
  fitted to per-interval ratios computed from cumulative counters sampled in the window.
  Negative: the cache is losing its working set (a scan, a capacity cut, a new tenant's traffic).
- eviction entropy: Shannon entropy of the window's evictions over groups (tenants, or key-prefix
  groups), divided by ln(K) for the K groups seen, so 1 = evictions spread evenly, 0 = one group
  takes every eviction (a flood thrashing itself, or a victim tenant starved by others).
- context-age skew: adjusted Fisher-Pearson sample skewness (G1) of resident blocks' ages
  (seconds since inserted). Large positive: a mass of young blocks and a few old ones (churn
  around a stable core, as in a scan); negative: mostly old blocks, few new (a cache gone stale).

The indicators only read what they are given: cumulative counters owned by the cache, and
insert/evict events. They own no counter of the cache, only their windows.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Hashable, Iterable, Sequence

Clock = Callable[[], float]


def ls_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Ordinary least-squares slope of ys on xs; 0.0 for fewer than two distinct xs."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0.0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def normalized_entropy(counts: Iterable[int]) -> float:
    """Shannon entropy of a count vector divided by ln(K), K = non-zero groups; 0.0 when K < 2."""
    cs = [c for c in counts if c > 0]
    if len(cs) < 2:
        return 0.0
    total = sum(cs)
    h = -sum(c / total * math.log(c / total) for c in cs)
    return h / math.log(len(cs))


def sample_skewness(values: Sequence[float]) -> float:
    """Adjusted Fisher-Pearson skewness G1 (as scipy.stats.skew(bias=False)); 0.0 if n < 3 or no spread."""
    n = len(values)
    if n < 3:
        return 0.0
    mean = sum(values) / n
    m2 = sum((v - mean) ** 2 for v in values) / n
    if m2 <= 1e-24 * max(1.0, mean * mean):
        return 0.0
    m3 = sum((v - mean) ** 3 for v in values) / n
    g1 = float(m3 / m2**1.5)
    return g1 * math.sqrt(n * (n - 1)) / (n - 2)


class HitRateSlope:
    """Slope (%/min) of the hit ratio over the last ``window_s``, from sampled cumulative counters.

    ``sample(hit_tokens, lookup_tokens)`` takes the cache's running totals (read, never owned);
    consecutive samples define intervals, and each interval with lookups gives one point
    (interval midpoint, 100 * hit delta / lookup delta).
    """

    def __init__(self, clock: Clock, window_s: float = 600.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.clock, self.window_s = clock, window_s
        self._samples: deque[tuple[float, int, int]] = deque()

    def sample(self, hit_tokens: int, lookup_tokens: int) -> None:
        t = self.clock()
        if self._samples and (hit_tokens < self._samples[-1][1] or lookup_tokens < self._samples[-1][2]):
            self._samples.clear()  # the counters were reset (a new cache): start over
        self._samples.append((t, hit_tokens, lookup_tokens))
        self._expire(t)

    def _expire(self, now: float) -> None:
        # Keep one sample older than the window: it opens the first interval inside it.
        while len(self._samples) > 1 and self._samples[1][0] < now - self.window_s:
            self._samples.popleft()

    def points(self) -> list[tuple[float, float]]:
        """(minutes, hit %) per interval with lookups, within the window."""
        self._expire(self.clock())
        out = []
        s = list(self._samples)
        for (t0, h0, l0), (t1, h1, l1) in zip(s, s[1:]):
            if l1 > l0:
                out.append(((t0 + t1) / 120.0, 100.0 * (h1 - h0) / (l1 - l0)))
        return out

    def value(self) -> float:
        """0.0 until the points span ``window_s / 20``: a slope over seconds would be all noise."""
        pts = self.points()
        if len(pts) < 2 or (pts[-1][0] - pts[0][0]) * 60.0 < self.window_s / 20:
            return 0.0
        return ls_slope([p[0] for p in pts], [p[1] for p in pts])


class EvictionEntropy:
    """Normalised entropy of evictions over groups within the last ``window_s``; also their count.

    The eviction path only bumps a per-group count in the current bucket (``bucket[0]``, a dict:
    no clock call, no allocation). Reads (``value``/``summary``, i.e. scrapes and the server's
    ticker) close the current bucket, stamped with the read time, and drop buckets older than
    the window: the window is exact to one read interval."""

    def __init__(self, clock: Clock, window_s: float = 600.0) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.clock, self.window_s = clock, window_s
        self.bucket: list[defaultdict[Hashable, int]] = [defaultdict(int)]  # a holder: hooks bind it once
        self._closed: deque[tuple[float, defaultdict[Hashable, int]]] = deque()

    def observe(self, group: Hashable) -> None:
        self.bucket[0][group] += 1

    def roll(self) -> None:
        now = self.clock()
        old, self.bucket[0] = self.bucket[0], defaultdict(int)  # one atomic swap: a racing writer lands in ``old``
        if old:
            self._closed.append((now, old))
        while self._closed and self._closed[0][0] <= now - self.window_s:  # its events are all older
            self._closed.popleft()

    def by_group(self) -> dict[Hashable, int]:
        self.roll()
        out: Counter[Hashable] = Counter()
        for _, counts in self._closed:
            out.update(counts)
        return dict(out)

    def summary(self) -> tuple[float, int]:
        """(normalised entropy, evictions) over the window."""
        counts = self.by_group()
        return normalized_entropy(counts.values()), sum(counts.values())

    def value(self) -> float:
        return self.summary()[0]

    def count(self) -> int:
        return self.summary()[1]

    def rate_per_s(self) -> float:
        return self.count() / self.window_s


class AgeSkew:
    """Skewness of resident blocks' ages; ``inserted``/``removed`` keep the birth times.

    Only blocks with ``hash(key) & sample_mask == 0`` are tracked (mask 3: one block in four, an
    unbiased sample since keys are hashes), which keeps the cost on the insert path low; at most
    ``max_sample`` ages enter the statistic, so a scrape costs O(max_sample).
    """

    def __init__(self, clock: Clock, max_sample: int = 20_000, sample_mask: int = 0) -> None:
        self.clock, self.max_sample, self.sample_mask = clock, max_sample, sample_mask
        self.born: dict[Hashable, float] = {}

    def inserted(self, key: Hashable) -> None:
        if not hash(key) & self.sample_mask and key not in self.born:
            self.born[key] = self.clock()

    def removed(self, key: Hashable) -> None:
        if not hash(key) & self.sample_mask:
            self.born.pop(key, None)

    def __len__(self) -> int:
        return len(self.born)

    def ages(self) -> list[float]:
        now = self.clock()
        born = list(self.born.values())
        step = max(1, len(born) // self.max_sample)
        return [now - b for b in born[::step]]

    def value(self) -> float:
        return sample_skewness(self.ages())

    def mean_age_s(self) -> float:
        a = self.ages()
        return sum(a) / len(a) if a else 0.0
