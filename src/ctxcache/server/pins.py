"""TTL pins for Anthropic ``cache_control`` breakpoints.

A breakpoint asks that the prompt prefix up to it stays cached for its ttl ("5m" or "1h"). The
ContextCache evicts only unpinned blocks, and a Match pins its whole chain (the deepest block
pins its ancestors), so the server keeps one Match per pinned prefix and releases it when the ttl
runs out. A hit on the same prefix refreshes the ttl, as in Anthropic's API. Pins share a byte
budget (a fraction of the first tier): past it, the pin that expires soonest is released early,
so pins can never wedge the cache into refusing every store.

Pins take the request's ``Prompt`` (made once by the prefill): the pin's lookup reuses the keys
the request already computed, and a pin is known by its deepest block key, so pinning neither
re-validates nor re-hashes the prompt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..cache import ContextCache, Match, Prompt
from ..keys import Tokens
from ..tiers import payload_nbytes

TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}


@dataclass
class Pin:
    match: Match
    expires: float
    nbytes: int
    ttl_s: float


class PinManager:
    def __init__(self, cache: ContextCache, max_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache, self.max_bytes, self.clock = cache, max_bytes, clock
        self._pins: dict[tuple[str, int, bytes], Pin] = {}
        self._lock = threading.Lock()
        self.pinned_bytes = 0
        self.released_early = 0

    def keep(self, tokens: Tokens | Prompt, namespace: str, ttl_s: float) -> int:
        """Pin the cached full blocks of ``tokens`` (best: the request's Prompt, or a prefix of it)
        for ``ttl_s`` seconds; returns the tokens pinned."""
        n = len(tokens) // self.cache.block_size * self.cache.block_size
        if n == 0 or self.max_bytes <= 0:
            return 0
        prompt = self.cache.prompt(tokens, namespace).prefix(n)
        key = (prompt.namespace.tenant, n, prompt.keys()[-1])  # the chain's last key names it all
        now = self.clock()
        with self._lock:
            pin = self._pins.get(key)
            if pin is not None:  # a hit on a pinned prefix refreshes its ttl
                pin.expires = max(pin.expires, now + ttl_s)
                pin.ttl_s = max(pin.ttl_s, ttl_s)
                return pin.match.hit_tokens
        m = self.cache.lookup(prompt)
        if m.n_blocks == 0:
            self.cache.release(m)
            return 0
        nbytes = payload_nbytes(m.payloads)
        if nbytes > self.max_bytes:
            self.cache.release(m)
            return 0
        with self._lock:
            old = self._pins.pop(key, None)  # lost a race with another keep(): keep one pin
            if old is not None:
                self._drop(old)
            self._pins[key] = Pin(m, now + ttl_s, nbytes, ttl_s)
            self.pinned_bytes += nbytes
            while self.pinned_bytes > self.max_bytes:
                k = min(self._pins, key=lambda k: self._pins[k].expires)
                self._drop(self._pins.pop(k))
                self.released_early += 1
        return m.hit_tokens

    def _drop(self, pin: Pin) -> None:
        self.pinned_bytes -= pin.nbytes
        if not pin.match.released:
            self.cache.release(pin.match)

    def sweep(self) -> int:
        """Release pins whose ttl has passed; returns how many."""
        now = self.clock()
        with self._lock:
            gone = [k for k, p in self._pins.items() if p.expires <= now]
            for k in gone:
                self._drop(self._pins.pop(k))
        return len(gone)

    def clear_tenant(self, tenant: str) -> int:
        """Release every pin of one tenant (before its cache is erased); returns how many."""
        with self._lock:
            gone = [k for k in self._pins if k[0] == tenant]
            for k in gone:
                self._drop(self._pins.pop(k))
        return len(gone)

    def clear(self) -> None:
        with self._lock:
            for pin in self._pins.values():
                self._drop(pin)
            self._pins.clear()

    def __len__(self) -> int:
        return len(self._pins)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "pinned_prefixes": len(self._pins),
                "pinned_bytes": self.pinned_bytes,
                "released_early": self.released_early,
            }
