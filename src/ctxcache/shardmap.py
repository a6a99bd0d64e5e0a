"""ShardedDict: a dict split into ``NSHARDS`` plain dicts by key, so no insert pays O(n).

A Python dict grows by rebuilding its whole table: at 10 million keys one insert copies every
entry (hundreds of ms, and the index, the memory tier, the slot and the policy all hold a map of
every block, which grow in step and resize on the same insert). Split 256 ways, a resize copies
1/256 of the keys.

Each owner's map picks shards by its own selector: the index by a bytes key's last byte (the
lookup walk indexes its shards by it inline), the memory tier, the slot's owners and the LRU/FIFO
order by ``hash(key) % p`` with a different prime ``p`` each (241, 239 and ``ORDER_SHARDS`` =
1021; 251 for the index's keys that are not bytes). With one shared selector, shard ``s`` of
every map held the same keys, reached a resize threshold on the same insert, and four or five
maps doubled together (10-18 ms at 2.8 M blocks). With a selector each, the shard of one map and
the shard of another that a key lands in hold independently drawn counts (the residues of one
uniform hash modulo different primes are independent, and independent of its last byte), so
their resizes fall on different inserts. Prime, so a shard's keys still differ in the low hash
bits where a dict starts probing (``& 255`` would give them all the same first probe). A bytes
object caches its hash, so ``hash(key) % p`` costs less than a guarded byte expression (the
selectors used the key's bytes until issue 15's p50 work: ~45 ns more per map access).
Hot paths (the lookup walk, the memory tier, the slot, the LRU) inline their owner's expression
to skip a Python call (tests/test_shardmap.py checks each copy against its owner's function);
everything else goes through the mapping methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, TypeVar, overload

NSHARDS = 256
# The LRU/FIFO order is split finer: its dicts also take a delete and a re-insert per hit, so they
# fill with deleted entries and rebuild (compact) every ~n hits besides growing; ~1,000 shards keep
# a compaction under ~10,000 keys at 10 M blocks, and the leading deleted entries a front read
# skips few (docs/ARCHITECTURE.md, "The index at scale").
ORDER_SHARDS = 1021


# One selector per owner of a map of every block. The bodies are the expressions hot paths inline.
def index_shard(key: object) -> int:
    """The index's node map (and the lookup walk over it). events/watch.py's stored_run inlines
    this and owner_shard (its per-block loop): change them together."""
    return key[-1] if key.__class__ is bytes and key else hash(key) % 251  # type: ignore[index]


def tier_shard(key: object) -> int:
    """The memory tier's payload and size maps."""
    return hash(key) % 241


def owner_shard(key: object) -> int:
    """The slot's owners map."""
    return hash(key) % 239


def order_shard(key: object) -> int:
    """The LRU/FIFO order's ``ORDER_SHARDS`` dicts."""
    return hash(key) % 1021


SELECTORS: dict[str, Callable[[object], int]] = {
    "index": index_shard,
    "tier": tier_shard,
    "owners": owner_shard,
    "order": order_shard,
}


K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")

_MISSING: Any = object()


def _gc_untracker() -> Callable[[object], None]:
    """``PyObject_GC_UnTrack`` where CPython exposes it, else a no-op.

    For objects that cannot be part of a reference cycle (index nodes, and the per-block maps,
    which refer only to such objects, bytes and ints): untracked, the cyclic GC never reads them.
    Safe either way: the collector treats references from an untracked container as external, so
    it never frees what they hold; the risk is only a cycle through them never being collected.
    """
    try:
        import ctypes

        fn = ctypes.pythonapi.PyObject_GC_UnTrack
    except (ImportError, AttributeError):  # not CPython: no cyclic GC cost to avoid
        return lambda obj: None
    fn.argtypes = [ctypes.py_object]
    fn.restype = None
    return fn  # type: ignore[no-any-return]


untrack = _gc_untracker()


class ShardedDict(MutableMapping[K, V]):
    """A MutableMapping over ``NSHARDS`` dicts (``ORDER_SHARDS`` for the order's selector), split by
    ``pick`` (its owner's selector, which the owner's hot paths inline). Iteration is shard by shard
    (no global order)."""

    __slots__ = ("shards", "pick")

    def __init__(self, pick: Callable[[object], int]) -> None:
        self.shards: list[dict[K, V]] = [{} for _ in range(ORDER_SHARDS if pick is order_shard else NSHARDS)]
        self.pick = pick

    def __getitem__(self, key: K) -> V:
        return self.shards[self.pick(key)][key]

    def __setitem__(self, key: K, value: V) -> None:
        self.shards[self.pick(key)][key] = value

    def __delitem__(self, key: K) -> None:
        del self.shards[self.pick(key)][key]

    def __contains__(self, key: object) -> bool:
        return key in self.shards[self.pick(key)]

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D) -> V | D: ...
    def get(self, key: K, default: Any = None) -> Any:
        return self.shards[self.pick(key)].get(key, default)

    @overload
    def pop(self, key: K) -> V: ...
    @overload
    def pop(self, key: K, default: V | D) -> V | D: ...
    def pop(self, key: K, default: Any = _MISSING) -> Any:
        shard = self.shards[self.pick(key)]
        return shard.pop(key) if default is _MISSING else shard.pop(key, default)

    def setdefault(self, key: K, default: V = None) -> V:  # type: ignore[assignment]
        return self.shards[self.pick(key)].setdefault(key, default)

    def __len__(self) -> int:
        return sum(map(len, self.shards))

    def __iter__(self) -> Iterator[K]:
        for shard in self.shards:
            yield from shard

    def clear(self) -> None:
        for shard in self.shards:
            shard.clear()

    def __repr__(self) -> str:
        return f"ShardedDict({len(self)} keys)"
