"""The history checker's world (sim/regions.py): its constants, a thread-free cache, logs that
remember what they committed, cuttable links, and what a seed's run produced."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cache import ContextCache
from ..engine import Engine
from ..replication.log import LinkDown, MemoryLog, RegionLog
from ..replication.ops import Update

REGIONS = ("A", "B", "C")
TENANTS = ("t0", "t1", "t2")
TTLS: tuple[float | None, ...] = (None, 20.0, 60.0, 300.0, 3600.0)
BS = 4  # tokens per block
OPS = 300  # operations per seed
SKEW = {"A": 3600.0, "B": 0.0, "C": -3600.0}
EPOCH = 1_700_000_000.0
ERASURES = ("erase_tenant", "invalidate")


def _prompts() -> list[list[int]]:
    """Per tenant the same token lists (namespaces keep tenants apart): two trunks of two blocks,
    each with two branches of one or two blocks, so an invalidated key has a subtree."""
    out = []
    for trunk in range(2):
        base = [100 * trunk + i for i in range(2 * BS)]
        out.append(base + [1000 + 10 * trunk + i for i in range(BS)])
        out.append(base + [2000 + 10 * trunk + i for i in range(2 * BS)])
    return out


PROMPTS = _prompts()


class SimCache(ContextCache):
    """A ContextCache without threads (``Engine(background=False)``) on the checker's clock."""

    def __init__(self, tiers: Sequence[Any], **options: Any) -> None:
        self._engine = Engine(tiers, background=False, **options)


class SimLog(MemoryLog):
    """A MemoryLog that remembers every update it ever committed (a trimmed log forgets them)."""

    def __init__(self, limit: int, committed: set[tuple[str, str]]) -> None:
        super().__init__(limit)
        self.committed = committed

    def commit(self, entries: list[bytes], state: dict[str, bytes], meta: dict[str, Any]) -> int:
        head = super().commit(entries, state, meta)
        self.committed.update((u.uid, u.kind) for u in map(Update.decode, entries))
        return head


class Link(RegionLog):
    """A peer's log as one region's replicator reaches it: down while ``(src, dst)`` is cut."""

    def __init__(self, log: MemoryLog, src: str, dst: str, cut: set[tuple[str, str]]) -> None:
        self.log, self.src, self.dst, self.cut = log, src, dst, cut

    def _check(self) -> None:
        if (self.src, self.dst) in self.cut:
            raise LinkDown(f"link {self.src}->{self.dst} cut")

    def read(self, after: int, count: int) -> list[tuple[int, bytes]]:
        self._check()
        return self.log.read(after, count)

    def first_seq(self) -> int:
        self._check()
        return self.log.first_seq()

    def load(self) -> tuple[dict[str, bytes], dict[str, str]]:
        self._check()
        return self.log.load()

    def ack(self, peer: str, seq: int) -> None:
        self._check()
        self.log.ack(peer, seq)


@dataclass
class Served:
    step: int
    region: str
    tenant: str
    prompt: int
    blocks: list[tuple[str, int]]  # (block key hex, step that stored it)


@dataclass
class Outcome:
    seed: int
    ops: int
    violations: list[str]
    conflicts: Counter[str]
    counts: Counter[str]  # held, duplicates, full_syncs, served_blocks, erasures_applied
    digests: dict[str, str]
    metadata: dict[str, Any]
    served: list[tuple[int, str, str, int, list[tuple[str, int]]]]
    applied: dict[str, list[tuple[int, str, str, str]]]
    history: list[str] = field(repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations


def report(o: Outcome, tail: int = 40) -> str:
    lines = [f"FAIL seed {o.seed}: {len(o.violations)} violations", *(f"  {v}" for v in o.violations[:5])]
    lines.append(f"  last {tail} steps of its history (replay: python -m ctxcache.sim.regions --seed {o.seed}):")
    lines += [f"    {h}" for h in o.history[-tail:]]
    return "\n".join(lines)
