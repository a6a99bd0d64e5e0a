"""ShardedDict: a dict split into ``NSHARDS`` plain dicts by key hash, so no insert pays O(n).

A Python dict grows by rebuilding its whole table: at 10 million keys one insert copies every
entry (hundreds of ms, and the index, the memory tier, the slot and the policy all hold a map of
every block, which grow in step and resize on the same insert). Split 251 ways, a resize copies
1/251 of the keys, and the shards reach their thresholds at different inserts.

The shard (``shard_index``) of a bytes key is its last byte: block keys are 16-byte hashes, so it
is uniform, and ``key[-1]`` costs a third of ``hash(key) % n``. Their dict hash (siphash of the
bytes) is independent of that byte, so one shard's keys still spread over its table. Any other
key goes to ``hash(key) % 251``: a prime, so a shard's keys differ in the low hash bits where a
dict starts probing (``& 255`` would give them all the same first probe). Hot paths (the lookup
walk, the memory tier, the LRU) inline the same expression to skip a Python call; everything
else goes through the mapping methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, TypeVar, overload

NSHARDS = 256
PRIME = 251


def shard_index(key: object) -> int:
    """Which of ``NSHARDS`` shards holds ``key`` (inlined in hot paths: keep them in step)."""
    return key[-1] if key.__class__ is bytes and key else hash(key) % PRIME  # type: ignore[index]


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
    """A MutableMapping over ``NSHARDS`` dicts. Iteration is shard by shard (no global order)."""

    __slots__ = ("shards",)

    def __init__(self) -> None:
        self.shards: list[dict[K, V]] = [{} for _ in range(NSHARDS)]

    def __getitem__(self, key: K) -> V:
        return self.shards[shard_index(key)][key]

    def __setitem__(self, key: K, value: V) -> None:
        self.shards[shard_index(key)][key] = value

    def __delitem__(self, key: K) -> None:
        del self.shards[shard_index(key)][key]

    def __contains__(self, key: object) -> bool:
        return key in self.shards[shard_index(key)]

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D) -> V | D: ...
    def get(self, key: K, default: Any = None) -> Any:
        return self.shards[shard_index(key)].get(key, default)

    @overload
    def pop(self, key: K) -> V: ...
    @overload
    def pop(self, key: K, default: V | D) -> V | D: ...
    def pop(self, key: K, default: Any = _MISSING) -> Any:
        shard = self.shards[shard_index(key)]
        return shard.pop(key) if default is _MISSING else shard.pop(key, default)

    def setdefault(self, key: K, default: V = None) -> V:  # type: ignore[assignment]
        return self.shards[shard_index(key)].setdefault(key, default)

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
