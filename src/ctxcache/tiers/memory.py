"""MemoryTier (hot): live payload objects in process memory, sized by measuring them."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any

from ..errors import PayloadError
from .base import Tier


def payload_nbytes(obj: Any) -> int:
    """Bytes held by a payload: bytes-like, numpy array, torch tensor, or dict/list/tuple of them.

    Array views count their own extent, not their base buffer's. Unknown types are an error rather
    than a guess, because a wrong size breaks the capacity guarantee.
    """
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, memoryview):
        return obj.nbytes
    if isinstance(obj, str):
        return len(obj.encode())
    if isinstance(obj, Mapping):
        return sum(payload_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(payload_nbytes(v) for v in obj)
    if obj is None:
        return 0
    # numpy arrays and torch tensors both expose an exact .nbytes; avoid importing torch.
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int) and hasattr(obj, "shape"):
        return nbytes
    raise PayloadError(
        f"cannot size a payload of type {type(obj).__name__}: use bytes, numpy arrays, "
        "torch tensors, or dicts/lists of them"
    )


class MemoryTier(Tier):
    kind = "memory"

    def __init__(self, capacity: int, policy: Any = "lru", **kw: Any) -> None:
        super().__init__(capacity, policy, **kw)
        self._data: dict[Hashable, Any] = {}
        self._sizes: dict[Hashable, int] = {}

    def size_of(self, payload: Any) -> int:
        return payload_nbytes(payload)

    def get(self, key: Hashable) -> Any | None:
        return self._data.get(key)

    def get_many(self, keys: Iterable[Hashable]) -> list[Any | None]:
        return list(map(self._data.get, keys))

    def put(self, key: Hashable, payload: Any) -> int:
        size = payload_nbytes(payload)
        self.used_bytes += size - self._sizes.get(key, 0)
        self._data[key] = payload
        self._sizes[key] = size
        return size

    def delete(self, key: Hashable) -> bool:
        if key not in self._data:
            return False
        del self._data[key]
        self.used_bytes -= self._sizes.pop(key)
        return True

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> Iterator[Hashable]:
        return iter(list(self._data))
