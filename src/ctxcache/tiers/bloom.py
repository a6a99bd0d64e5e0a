"""KeyFilter: a Bloom filter (rbloom) over the keys a shared tier holds, so a lookup that would
miss costs no round trip.

It can say "maybe" for a key that is gone (deleted, expired) and cannot forget keys, so it is
rebuilt from a full key scan at start, after a reconnect, periodically, and as soon as it holds
more keys than it was sized for (``saturated``); in between, keys that
other processes write are added only by that rebuild (until then they read as misses, which is
safe). ``rebuild`` swaps in a new filter in one assignment, so readers never see a half-built one.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from ..errors import MissingDependencyError


def _bloom(expected: int, fpr: float) -> Any:
    try:
        from rbloom import Bloom
    except ImportError:
        raise MissingDependencyError("the Bloom filter needs 'rbloom': pip install 'ctxcache[redis]'") from None
    return Bloom(max(expected, 1024), fpr)


class KeyFilter:
    def __init__(self, expected: int = 1_000_000, fpr: float = 0.01) -> None:
        if not 0.0 < fpr < 1.0 or expected < 1:
            raise ValueError(f"Bloom filter needs expected >= 1 and 0 < fpr < 1, got {expected}, {fpr}")
        self.expected, self.fpr = expected, fpr  # expected: the size of the next rebuild's filter
        self._bloom = _bloom(expected, fpr)
        self._capacity = expected  # keys the current filter was sized for
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
        fresh = _bloom(expected, self.fpr)
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
            if n > expected:  # more keys than the hint: size up for next time
                self.expected = 2 * n
            self._bloom, self.count, self.ready = fresh, n + len(during), True
            self._capacity = expected
        return n

    @property
    def saturated(self) -> bool:
        """More keys than it was sized for: false positives are above ``fpr``; rebuild soon."""
        return self.count > self._capacity

    def stats(self) -> dict[str, Any]:
        return {"keys": self.count, "checks": self.checks, "skipped": self.skipped, "ready": self.ready}
