"""Token buckets for the bytes a tenant loads from slow tiers (disk, Redis).

A bucket holds up to ``burst`` bytes and refills at ``rate`` bytes/s. A load asks for its bytes:
granted at once when the bucket has them, else the caller learns how long to wait and either
waits (then takes them) or recomputes instead, as the tenancy config says. A load bigger than
the burst is granted when the bucket is full (and drains it), so no load is refused forever.
Blocks found by discovery (in shared storage, not yet indexed) have no size until they are read:
they are charged after the read (``charge``, which may leave the bucket in debt), and discovery
only starts while the bucket is not empty, so a tenant cannot bypass its limit through it.
Thread-safe: loads run outside the engine's lock.
"""

from __future__ import annotations

import threading

from ..units import Clock


class TokenBucket:
    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        self.rate, self.burst, self.clock = float(rate), int(burst), clock
        self._level = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self.clock()
        self._level = min(float(self.burst), self._level + (now - self._at) * self.rate)
        self._at = now

    def wait_for(self, nbytes: int) -> float:
        """Seconds until ``nbytes`` could be taken (0: now)."""
        with self._lock:
            self._refill()
            need = min(float(nbytes), float(self.burst)) - self._level
            return max(0.0, need / self.rate)

    def try_take(self, nbytes: int) -> bool:
        with self._lock:
            self._refill()
            if self._level >= min(float(nbytes), float(self.burst)):
                self._level -= nbytes  # may go below 0 for an oversized load: later ones wait
                return True
            return False

    def charge(self, nbytes: int) -> None:
        """Take bytes already read, even into debt: later loads wait until it is paid back."""
        with self._lock:
            self._refill()
            self._level -= nbytes
