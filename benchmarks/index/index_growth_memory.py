"""Where a block's bytes go: the per-block structures of one memory-tier cache, by ``sys.getsizeof``.

Used by index_growth_worker.py at each decade mark, for either tree (today's plain dicts or the
sharded maps). Per structure: the maps' own tables (summed over shards; an OrderedDict's size
includes its per-key link nodes) and the objects they hold, sampled: a sampled value object that
is shared (one tuple for every block's owner, the 1-byte payload ``b"x"``, small ints) counts
once, not per block. Small objects are rounded up to pymalloc's 16-byte size classes, which is what
they take. What this leaves out of the RSS (allocator slack, arenas part-used, the interpreter's
own growth) shows as the difference to the RSS per block measured at the same mark.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from typing import Any

SAMPLE = 2000


def alloc(obj: object) -> int:
    """Bytes an object takes: small ones (pymalloc, <= 512 B) round up to 16."""
    n = sys.getsizeof(obj)
    return -(-n // 16) * 16 if n <= 512 else n


def containers(m: Any) -> list[Any]:
    """The dicts/OrderedDicts a map is made of: a ShardedDict's shards, a list of shards, itself."""
    if m is None:
        return []
    if hasattr(m, "shards"):
        return list(m.shards)
    return list(m) if isinstance(m, list) else [m]


def tables(m: Any) -> int:
    return sum(sys.getsizeof(c) for c in containers(m))


def sample_items(m: Any) -> list[tuple[Any, Any]]:
    out: list[tuple[Any, Any]] = []
    for c in containers(m):
        out += itertools.islice(c.items(), SAMPLE // 16 + 1)
        if len(out) >= SAMPLE:
            break
    return out


def per_block_objects(objs: Iterable[Any]) -> float:
    """Mean bytes per entry of the objects a map holds: distinct objects only (shared ones count
    once for the whole sample, i.e. ~0 per block), rounded to their allocation size."""
    objs = list(objs)
    if not objs:
        return 0.0
    seen: dict[int, int] = {}
    for o in objs:
        if id(o) not in seen and not (isinstance(o, int) and -5 <= o <= 256):  # cached small ints
            seen[id(o)] = alloc(o)
    return sum(seen.values()) / len(objs)


def structure_bytes(cache: Any) -> dict[str, Any]:
    """Bytes per block by structure, their sum, and how many references each key object has (one
    key object shared by every map: index, node, tier, slot, policy)."""
    e = cache._engine
    idx, tier, slot = e.index, e.tiers[0], e.slots[0]
    policy = slot.policy
    n = len(idx)
    if not n:
        return {}
    nodes = [v for _, v in sample_items(idx._nodes)]
    order = getattr(policy, "_shards", None) or getattr(policy, "_order", None)
    maps = {
        "index node map": idx._nodes,
        "index evictable map": getattr(idx, "_evictable", None),
        "tier payload map": tier._data,
        "tier size map": tier._sizes,
        "slot owners map": slot.owners,
        "policy order (incl. its link nodes)": order,
    }
    out: dict[str, float] = {f"{k} tables": tables(m) / n for k, m in maps.items() if m is not None}
    out["Node objects"] = per_block_objects(nodes)
    out["key bytes objects"] = per_block_objects(nd.key for nd in nodes)
    out["token bytes objects"] = per_block_objects(nd.tokens for nd in nodes)
    out["node tags"] = per_block_objects(nd.tag for nd in nodes if nd.tag is not None)
    out["payload objects"] = per_block_objects(v for _, v in sample_items(tier._data))
    out["slot owner values"] = per_block_objects(v for _, v in sample_items(slot.owners))
    out["policy values (stamps)"] = per_block_objects(v for _, v in sample_items(order))
    out = {k: round(v, 1) for k, v in out.items()}
    refs = [sys.getrefcount(nd.key) - 1 for nd in nodes]  # less getrefcount's own argument
    return {
        "blocks": n,
        "bytes_per_block": out,
        "total_bytes_per_block": round(sum(out.values()), 1),
        "key_object_refs_mean": round(sum(refs) / len(refs), 2),
    }
