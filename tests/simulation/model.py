"""The reference model: what a correct cache may serve and count, and the invariants the harness
checks against the engine after every step (and at every I/O point of the mover).

What may be served: for each (tenant, chain of token blocks), the payloads stored for it since
the tenant was last erased; a block whose TTL has surely run out (its last store or hit plus the
tenant's TTL is past) may not be. The model touches a block at every store of a prompt holding
it, which the engine does not always (a store stopped early), so the model's deadline is never
earlier than the engine's: a block it calls expired is expired. The exception is a block whose
TTL a restart made unknown (None): a store makes it known only where the engine placed or kept
the block (gave it a deadline); one the store stopped before stays unknown (``still_unknown``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from ctxcache.engine import Engine

from .plan import BLOCK, Setup, payload_size


class Violation(AssertionError):
    """An invariant failed."""


def payload(tenant: str, chain: tuple[int, ...], version: int) -> bytes:
    seed = hashlib.blake2b(repr((tenant, chain, version)).encode(), digest_size=32).digest()
    return (seed * 8)[: payload_size(version)]


@dataclass
class Model:
    setup: Setup
    versions: dict[tuple[str, tuple[int, ...]], set[bytes]] = field(default_factory=dict)
    touched: dict[tuple[str, tuple[int, ...]], float | None] = field(default_factory=dict)  # None: unknown
    counts: dict[str, int] = field(default_factory=dict)
    allowed_lost: int = 0
    kept: set[bytes] = field(default_factory=set)  # keys a refused delete or write kept (simtiers.Faults)
    orphans: dict[int, set[bytes]] = field(default_factory=dict)  # tier -> keys an earlier run left (Redis)

    def ttl(self, tenant: str) -> float | None:
        return next(t.ttl for t in self.setup.tenants if t.id == tenant)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def chain(self, prompt: int, i: int) -> tuple[int, ...]:
        return tuple(self.setup.prompts[prompt][: BLOCK * (i + 1)])

    def stored(self, tenant: str, prompt: int, first: int, n: int, version: int, now: float) -> list[bytes]:
        out = []
        for i in range(n):
            key = (tenant, self.chain(prompt, i))
            if i >= first:
                p = payload(tenant, key[1], version)
                self.versions.setdefault(key, set()).add(p)
                out.append(p)
            self.touched[key] = now
        return out

    def unknown_ttls(self, tenant: str, prompt: int) -> list[int]:
        """Blocks of the prompt whose TTL the engine no longer knows (live at a restart)."""
        n = len(self.setup.prompts[prompt]) // BLOCK
        return [i for i in range(n) if (tenant, self.chain(prompt, i)) in self.touched
                and self.touched[(tenant, self.chain(prompt, i))] is None]  # fmt: skip

    def still_unknown(self, tenant: str, prompt: int, blocks: list[int]) -> None:
        for i in blocks:
            self.touched[(tenant, self.chain(prompt, i))] = None

    def served(self, tenant: str, prompt: int, payloads: list[Any], now: float) -> None:
        """A hit of ``payloads`` (blocks 0..) for the prompt: each exactly one stored, none expired."""
        ttl = self.ttl(tenant)
        for i, got in enumerate(payloads):
            key = (tenant, self.chain(prompt, i))
            data = bytes(memoryview(got)) if got is not None else None
            if data not in self.versions.get(key, ()):
                raise Violation(f"block {i} of prompt {prompt} for {tenant!r} served a payload never stored "
                                f"since its last erasure ({None if data is None else len(data)} B)")  # fmt: skip
            last = self.touched.get(key)
            if ttl is not None and last is not None and last + ttl <= now:
                raise Violation(f"block {i} of prompt {prompt} for {tenant!r} served {now - last - ttl:.2f} s "
                                f"after its TTL ran out")  # fmt: skip
            self.touched[key] = now

    def erased(self, tenant: str) -> None:
        for key in [k for k in self.versions if k[0] == tenant]:
            del self.versions[key]

    def restarted(self, now: float) -> None:
        """A block still live at a restart has a TTL the engine no longer knows: it restarts then
        (docs/testing.md); one already expired stays expired."""
        for key, last in self.touched.items():
            ttl = self.ttl(key[0])
            if ttl is not None and last is not None and last + ttl > now:
                self.touched[key] = None
        self.counts.clear()


def check_accounting(e: Engine) -> None:
    """At any point the lock is free: each slot's ``used`` is what it charges its blocks' owners."""
    for s in e.slots:
        charged = sum(n for _, n in s.owners.values())
        if s.used() != charged or sum(s.by_tenant.values()) != charged:
            raise Violation(f"tier {s.name}: used {s.used()} (held {s.tier.used_bytes} + inflow {s.inflow} - "
                            f"outflow {s.outflow}) but charges {charged} B to owners ({len(s.owners)} blocks)")  # fmt: skip
        if s.inflow < 0 or s.outflow < 0:
            raise Violation(f"tier {s.name}: negative reservation (inflow {s.inflow}, outflow {s.outflow})")


def check_pins(e: Engine, held: list[Any]) -> None:
    want: dict[Hashable, int] = {}
    for m in held:
        for node in m._pinned:
            want[node.key] = want.get(node.key, 0) + 1
            if e.index.get(node.key) is not node:
                raise Violation("a block pinned by a held match left the index")
    for node in e.index:
        if node.pins != want.get(node.key, 0):
            raise Violation(f"block at depth {node.depth}: {node.pins} pins, held matches account for "
                            f"{want.get(node.key, 0)}")  # fmt: skip


def check_counters(e: Engine, model: Model) -> None:
    c = e.counters
    for name, n in model.counts.items():
        if getattr(c, name) != n:
            raise Violation(f"counter {name}: engine {getattr(c, name)}, model {n}")
    if c.lost > model.allowed_lost:
        raise Violation(f"lost {c.lost} blocks, but only {model.allowed_lost} were corrupted or had their "
                        f"only copy's write refused")  # fmt: skip
