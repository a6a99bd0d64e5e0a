"""A region's replicated metadata: per key, a merged sparse clock and multi-value registers.

Pure and deterministic (no I/O, no time): the replicator, the workers following a region's log
and the seeded history checker all run this one implementation.

Delivery is causal per key. An update from region ``o`` with clock ``c`` is delivered once the
region has delivered ``o``'s previous update on that key (``c[o] == local[o] + 1``) and everything
``o`` had seen of it (``c[r] <= local[r]`` for every other ``r``); an update with
``c[o] <= local[o]`` is a duplicate (relayed twice, re-read after a crash) and dropped; any other is
held until what it depends on arrives. Holding is not a nicety: effects (an erasure) are applied
on delivery, and delivering a later update first would merge its clock and make the erasure it
depends on look like a duplicate, never applied.

Each field of a key (``ops.FIELD``) keeps the antichain of its updates that no later one
superseded: the latest update when there is one, every concurrent one otherwise. A field's value
is a fixed function of that set, never of arrival order, so regions that delivered the same updates
hold the same metadata (convergence). The rules for concurrent updates:

- ttl: the shortest wins (None, no TTL, is the longest); durations, never wall-clock deadlines.
- pin: unpin wins (a pin holds memory; the safe outcome of a race is to release it).
- sem_feedback: wrong wins (a response reported wrong by any region is not served anywhere).
- erasure dominates: a pin or feedback not strictly after the key's latest erasures
  (invalidate, sem_erase) is void; an erasure's effect is applied on delivery to whatever data
  the region holds then, which includes any block stored concurrently in that region.

Pruning (docs/regions.md): a clock entry or a superseded update may be dropped once it is causally
stable, i.e. every region's clock for the key covers it; later updates then all carry it in their
past, so no comparison can change. This module prunes superseded register entries (safe at once:
a dominated update never wins a rule) and keeps clock entries (K counters per key).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .clock import SparseClock, get_varint, put_varint
from .ops import FIELD, Update, check_value, key_for

MAX_PENDING = 100_000  # held updates; beyond it the oldest are dropped and a full sync is due
RULE = {"ttl": "ttl_shortest_wins", "pin": "unpin_wins", "fb": "wrong_wins", "erase": "concurrent_erasures"}


@dataclass
class KeyState:
    clock: SparseClock = field(default_factory=SparseClock)
    regs: dict[str, tuple[Update, ...]] = field(default_factory=dict)

    def live(self, name: str) -> list[Update]:
        """Entries of ``name`` that no erasure of this key voids (erasure dominates)."""
        erases = self.regs.get("erase", ())
        return [u for u in self.regs.get(name, ()) if all(e.clock < u.clock for e in erases)]

    def value(self, name: str) -> Any:
        if name == "ttl":
            vals = [u.value for u in self.regs.get("ttl", ())]
            if not vals or all(v is None for v in vals):
                return None
            return min(v for v in vals if v is not None)
        if name in ("pin", "fb"):
            live = self.live(name)
            return all(u.value for u in live) if live else None
        return sorted(u.uid for u in self.regs.get(name, ()))

    def view(self) -> dict[str, Any]:
        out: dict[str, Any] = {"clock": dict(self.clock)}
        for name in sorted(self.regs):
            out[name] = self.value(name)
        return out

    def encode(self) -> bytes:
        out = self.clock.encode()
        entries = [u for name in sorted(self.regs) for u in self.regs[name]]
        put_varint(out, len(entries))
        for u in entries:
            raw = u.encode()
            put_varint(out, len(raw))
            out += raw
        return bytes(out)

    @classmethod
    def decode(cls, buf: bytes) -> KeyState:
        clock, pos = SparseClock.decode(buf)
        n, pos = get_varint(buf, pos)
        regs: dict[str, list[Update]] = {}
        for _ in range(n):
            size, pos = get_varint(buf, pos)
            u = Update.decode(bytes(buf[pos : pos + size]))
            pos += size
            regs.setdefault(u.field, []).append(u)
        return cls(clock, {k: tuple(v) for k, v in regs.items()})


def _maximal(entries: list[Update]) -> tuple[Update, ...]:
    by_uid = {u.uid: u for u in entries}
    keep = [u for u in by_uid.values() if not any(u.clock < o.clock for o in by_uid.values())]
    return tuple(sorted(keep, key=lambda u: u.uid))


class RegionState:
    def __init__(self, region: str) -> None:
        self.region = region
        self.keys: dict[str, KeyState] = {}
        self.pending: dict[str, dict[str, Update]] = {}
        self.n_pending = 0
        self.counters: Counter[str] = Counter()  # local, applied, duplicates, held, pending_dropped
        self.conflicts: Counter[str] = Counter()  # by rule
        self.resync_due = False

    def clock_of(self, key: str) -> SparseClock:
        ks = self.keys.get(key)
        return ks.clock if ks is not None else SparseClock()

    def local(self, kind: str, target: str | bytes, value: Any = None, at: float = 0.0) -> Update:
        """An update made in this region: stamped with the key's clock bumped, delivered at once."""
        key = key_for(kind, target)
        value = check_value(kind, value)
        u = Update(self.region, key, kind, value, self.clock_of(key).bump(self.region), at)
        self._deliver(u)
        self.counters["local"] += 1
        return u

    def receive(self, u: Update) -> list[Update]:
        """Returns the updates delivered now, in order: ``u`` and any held one it released."""
        local = self.clock_of(u.key)
        if u.clock.get(u.origin) <= local.get(u.origin):
            self.counters["duplicates"] += 1
            return []
        if not self._ready(u, local):
            held = self.pending.setdefault(u.key, {})
            if u.uid not in held:
                held[u.uid] = u
                self.n_pending += 1
                self.counters["held"] += 1
                self._bound_pending()
            return []
        self._deliver(u)
        return [u, *self._release(u.key)]

    @staticmethod
    def _ready(u: Update, local: SparseClock) -> bool:
        o = u.origin
        return u.clock.get(o) == local.get(o) + 1 and all(n <= local.get(r) for r, n in u.clock.items() if r != o)

    def _release(self, key: str) -> list[Update]:
        out: list[Update] = []
        held = self.pending.get(key)
        progress = True
        while held and progress:
            progress = False
            local = self.clock_of(key)
            for uid, u in sorted(held.items()):
                if u.clock.get(u.origin) <= local.get(u.origin):
                    del held[uid]
                    self.n_pending -= 1
                    self.counters["duplicates"] += 1
                elif self._ready(u, local):
                    del held[uid]
                    self.n_pending -= 1
                    self._deliver(u)
                    out.append(u)
                    progress = True
                    break
        if held is not None and not held:
            del self.pending[key]
        return out

    def _bound_pending(self) -> None:
        while self.n_pending > MAX_PENDING:
            key = next(iter(self.pending))
            held = self.pending[key]
            held.pop(min(held))
            self.n_pending -= 1
            self.counters["pending_dropped"] += 1
            self.resync_due = True  # what was dropped comes back with a full sync
            if not held:
                del self.pending[key]

    def _deliver(self, u: Update) -> None:
        ks = self.keys.setdefault(u.key, KeyState())
        name = u.field
        reg = ks.regs.get(name, ())
        concurrent = [x for x in reg if x.clock.compare(u.clock) == "concurrent"]
        if concurrent:
            self.conflicts[RULE[name]] += 1
        against = ("pin", "fb") if name == "erase" else ("erase",) if name in ("pin", "fb") else ()
        if any(x.clock.compare(u.clock) == "concurrent" for n in against for x in ks.regs.get(n, ())):
            self.conflicts["erasure_dominates"] += 1
        ks.regs[name] = tuple(sorted([*concurrent, u], key=lambda x: x.uid))
        ks.clock = ks.clock.merge(u.clock)
        self.counters["applied"] += 1

    # --- full sync (a peer's log was trimmed past what this region had read) ----------------------
    def merge_key(self, key: str, remote: KeyState) -> list[Update]:
        """Join a peer's state of ``key`` into this one. Returns the updates this region had not
        delivered (their effects are due now), oldest first by clock size."""
        ks = self.keys.setdefault(key, KeyState())
        new = [u for name in remote.regs for u in remote.regs[name] if not u.clock <= ks.clock]
        for name in set(ks.regs) | set(remote.regs):
            ks.regs[name] = _maximal([*ks.regs.get(name, ()), *remote.regs.get(name, ())])
        ks.clock = ks.clock.merge(remote.clock)
        self.counters["applied"] += len(new)
        return [*sorted(new, key=lambda u: (sum(u.clock.values()), u.uid)), *self._release(key)]

    # --- views -------------------------------------------------------------------------------------
    def value(self, key: str, name: str) -> Any:
        ks = self.keys.get(key)
        return None if ks is None else ks.value(name)

    def metadata(self) -> dict[str, dict[str, Any]]:
        return {k: self.keys[k].view() for k in sorted(self.keys)}

    def digest(self) -> str:
        """Equal in two regions iff their metadata is (the convergence check)."""
        raw = json.dumps(self.metadata(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


__all__ = ["FIELD", "KeyState", "RegionState"]
