"""KeyFilter: a Bloom filter (rbloom) over the keys a shared tier holds, so a lookup that would
miss costs no round trip.

It can say "maybe" for a key that is gone (deleted, expired) and cannot forget keys, so it is
rebuilt from a full key scan at start, after a reconnect, periodically, and as soon as it holds
more keys than its capacity (``saturated``: false positives above ``fpr``); in between, keys that
other processes write are added only by that rebuild (until then they read as misses, which is
safe). ``rebuild`` swaps in a new filter in one assignment, so readers never see a half-built one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from ..errors import MissingDependencyError

# A filter is never sized for fewer keys: that many cost a few KiB (1.2 KiB at 1%), and a smaller
# filter would need a full key scan at every doubling while a tier fills.
MIN_ITEMS = 1024


def _hash_counts(fpr: float) -> list[int]:
    """The hashes per key rbloom picks: floor(log2(1 / fpr)), computed in floating point, so where
    that is (nearly) whole it lands on either side depending on the size asked for."""
    x = -math.log2(fpr)
    return sorted({k for k in (math.floor(x - 1e-9), math.floor(x + 1e-9)) if k >= 1})


def _bits_per_key(k: int, fpr: float) -> float:
    """Bits per key at which ``k`` hashes give false positives at ``fpr``: (1 - e^(-k n/m))^k = fpr."""
    return -k / math.log1p(-(fpr ** (1 / k)))


def capacity_of(bits: int, fpr: float) -> int:
    """Keys a filter of ``bits`` (built by rbloom for ``fpr``) holds before false positives pass ``fpr``."""
    return int(min(bits / _bits_per_key(k, fpr) for k in _hash_counts(fpr)))


def _bloom(expected: int, fpr: float) -> tuple[Any, int]:
    """A filter that holds ``expected`` keys (at least MIN_ITEMS) within ``fpr``, and its capacity.

    rbloom allocates the bits an ideal filter needs but truncates the hash count, so at the size
    asked for its false positives run up to a few percent over ``fpr``: ask for enough keys that
    the bits it allocates carry ``expected`` keys with the hash count it picks."""
    try:
        from rbloom import Bloom
    except ImportError:
        raise MissingDependencyError("the Bloom filter needs 'rbloom': pip install 'ctxcache[redis]'") from None
    want = max(expected, MIN_ITEMS)
    per_key = max(_bits_per_key(k, fpr) for k in _hash_counts(fpr))
    bloom = Bloom(math.ceil(want * per_key / (-math.log2(fpr) / math.log(2))) + 1, fpr)
    return bloom, capacity_of(bloom.size_in_bits, fpr)


class KeyFilter:
    def __init__(self, expected: int = 1_000_000, fpr: float = 0.01) -> None:
        if not 0.0 < fpr < 0.5 or expected < 1:
            # from 0.5 up rbloom may hash a key 0 times: every key would read "maybe"
            raise ValueError(f"Bloom filter needs expected >= 1 and 0 < fpr < 0.5, got {expected}, {fpr}")
        self.expected, self.fpr = expected, fpr  # expected: the size of the next rebuild's filter
        self._bloom, self._capacity = _bloom(expected, fpr)
        self.count = 0  # keys added since the last rebuild, plus the keys it was built from
        self.ready = False  # False until the first rebuild: then every key is a "maybe"
        self.checks = 0
        self.skipped = 0  # checks answered "surely absent": round trips avoided
        self._lock = threading.Lock()
        self._during: list[Hashable] | None = None  # adds made while a rebuild scans

    def add(self, key: Hashable) -> None:
        with self._lock:
            self._bloom.add(key)
            self.count += 1
            if self._during is not None:
                self._during.append(key)

    def might_contain_many(self, keys: Sequence[Hashable]) -> list[bool]:
        self.checks += len(keys)
        if not self.ready:
            return [True] * len(keys)
        bloom = self._bloom
        out = [k in bloom for k in keys]
        self.skipped += out.count(False)
        return out

    def rebuild(self, keys: Iterable[Hashable], hint: int = 0) -> int:
        """Replace the filter with one holding exactly ``keys``; sized for growth. Returns the count."""
        expected = max(self.expected, 2 * hint)
        fresh, capacity = _bloom(expected, self.fpr)
        with self._lock:
            self._during = []
        n = 0
        try:
            for k in keys:
                fresh.add(k)
                n += 1
        finally:  # a scan that raises leaves the old filter in place
            with self._lock:
                during, self._during = self._during or [], None
        with self._lock:
            for k in during:  # written while the scan ran: the scan may have missed them
                fresh.add(k)
            count = n + len(during)
            if count > capacity:  # more keys than the hint: size up for next time
                self.expected = 2 * count
            self._bloom, self.count, self.ready = fresh, count, True
            self._capacity = capacity
        return n

    @property
    def capacity(self) -> int:
        """Keys the current filter holds before its false positives pass ``fpr`` (at least the
        size it was built for, and at least MIN_ITEMS)."""
        return self._capacity

    @property
    def saturated(self) -> bool:
        """More keys than its capacity: false positives are above ``fpr``; rebuild soon."""
        return self.count > self._capacity

    def stats(self) -> dict[str, Any]:
        out = {"keys": self.count, "capacity": self._capacity, "checks": self.checks, "skipped": self.skipped}
        return {**out, "ready": self.ready}
