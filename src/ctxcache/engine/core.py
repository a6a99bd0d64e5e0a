"""Engine: the one owner of the index, the slots (tier + policy + counters), placement, the
mover and the lock. ``ContextCache`` is its public facade.

Locking: one re-entrant lock guards the index, every RAM tier, every slot and the mover's
queue. Token validation happens once per request, in ``prompt``, before taking it; key hashing
happens under it during the walk, lazily, so a cold lookup hashes only the blocks it walks. No
disk or network I/O runs under it (see lookup.py and mover.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from ..index import RadixIndex
from ..keys import BlockHasher, Namespace, Prompt, Tokens
from ..tiers import Tier
from ..units import Clock
from ..usage import Usage
from . import lookup as _lookup
from . import store as _store
from .factory import make_slots
from .lookup import Match
from .placement import LOST, Placement
from .slot import Counters, Slot


class Engine:
    def __init__(
        self,
        tiers: Sequence[Tier],
        *,
        block_size: int = 256,
        hash: str = "xxh3",
        model: str = "default",
        salt: str | bytes = b"",
        clock: Clock = time.monotonic,
        promote: bool = True,
        write_buffer: int = 256 << 20,
    ) -> None:
        self.slots: list[Slot] = make_slots(tiers, clock, block_size)
        self.hasher = BlockHasher(block_size, hash)
        self.block_size = block_size
        self.model = model
        self.salt = salt.encode() if isinstance(salt, str) else bytes(salt)
        self.clock = clock
        self.tiers = [s.tier for s in self.slots]
        self.index = RadixIndex()
        self.lock = threading.RLock()
        self.counters = Counters()
        self._namespaces: dict[str, Namespace] = {}
        self.placement = Placement(
            self.slots, self.index, self.lock, self.counters, promote=promote, write_buffer=write_buffer
        )
        # One RAM tier of live objects: lookups need no verification beyond the index's.
        self.simple = len(self.slots) == 1 and self.placement.all_memory and self.tiers[0].codec is None
        self._closed = False
        for slot in self.slots:
            slot.policy.attach(self.index)
            if slot.persistent:  # blocks left by an earlier run: evictable orphans, oldest first
                slot.admit_chain(list(slot.tier.keys()))

    # --- requests -----------------------------------------------------------------------------------
    def namespace(self, namespace: str | Namespace = "default") -> Namespace:
        if isinstance(namespace, Namespace):
            return namespace
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str or Namespace, not {type(namespace).__name__}")
        ns = self._namespaces.get(namespace)
        if ns is None:
            ns = Namespace(tenant=namespace, model=self.model, salt=self.salt)
            self._namespaces[namespace] = ns
        return ns

    def prompt(self, tokens: Tokens | Prompt, namespace: str | Namespace = "default") -> Prompt:
        """Validate once; a Prompt passes through (its own namespace wins)."""
        if isinstance(tokens, Prompt):
            return tokens
        return self.hasher.prompt(tokens, self.namespace(namespace))

    def lookup(self, tokens: Tokens | Prompt, namespace: str | Namespace = "default") -> Match:
        return _lookup.lookup(self, self.prompt(tokens, namespace))

    def release(self, match: Match) -> None:
        with self.lock:
            self.index.unpin(match._nodes[-1:])
            match.released = True
            if match._nodes and match._nodes[-1].tier == LOST:
                self.placement.prune(match._nodes[-1].key)

    def store(
        self, tokens: Tokens | Prompt, payloads: Sequence[Any], namespace: str | Namespace, first_block: int
    ) -> Usage:
        return _store.store(self, self.prompt(tokens, namespace), payloads, first_block)

    # --- maintenance --------------------------------------------------------------------------------
    def evict_all(self) -> int:
        with self.lock:
            before = len(self.index)
            for t in range(len(self.slots)):
                self.placement.make_room(t, self.placement.used(t))
            removed = before - len(self.index)
        self.flush()
        return removed

    def flush(self, timeout: float | None = None) -> bool:
        return self.placement.mover.wait_idle(timeout)

    def stats(self) -> dict[str, Any]:
        with self.lock:
            c = self.counters
            out: dict[str, Any] = c.as_dict()
            out["blocks"] = len(self.index)
            out["bytes"] = sum(s.used() for s in self.slots)
            out["token_hit_ratio"] = c.hit_tokens / c.lookup_tokens if c.lookup_tokens else 0.0
            mover = self.placement.mover
            out["pending_moves"], out["write_buffer_bytes"] = len(mover.queue) + mover.busy, mover.buffered
            out["corrupt"] = sum(t.corrupt for t in self.tiers)
            out["tiers"] = {s.name: s.stats() for s in self.slots}
        return out

    def spill(self, budget_s: float = 30.0) -> None:
        """Write RAM blocks down into the first persistent tier when it is local disk.

        Only disk: a remote tier may be down or hung at shutdown, and close() must not wait on
        it. Bounded by ``budget_s`` in all; what does not fit in time stays in RAM (and is lost).
        """
        pl = self.placement
        if not pl.persistent or self.tiers[min(pl.persistent)].kind != "disk":
            return
        deadline = time.monotonic() + budget_s
        for t in range(min(pl.persistent)):
            if self.tiers[t].slow:
                continue
            while time.monotonic() < deadline:
                with self.lock:
                    moved = pl.spill(t)
                if not moved or not pl.mover.wait_idle(max(0.1, deadline - time.monotonic())):
                    break

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.spill()
        self.placement.mover.stop()
        with self.lock:
            for tier in self.tiers:
                tier.close()
