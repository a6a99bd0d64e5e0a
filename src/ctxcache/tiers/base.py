"""The Tier ABC: a keyed byte store with capacity, watermarks and an eviction policy.

A tier owns storage and byte accounting; its ``policy`` only orders keys. The ContextCache
decides when to evict (watermarks) and where a victim goes (demotion to the next tier, or out of
the cache), because only it knows the radix index's rules.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Iterator
from typing import Any, ClassVar

from ..errors import ConfigError
from ..policies import Policy, make_policy


class Tier(ABC):
    kind: ClassVar[str] = ""

    def __init__(
        self,
        capacity: int,
        policy: Policy | str = "lru",
        *,
        name: str | None = None,
        high: float = 0.85,
        low: float = 0.70,
    ) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ConfigError(f"tier capacity must be a positive number of bytes, got {capacity!r}")
        if not 0.0 < low <= high <= 1.0:
            raise ConfigError(f"watermarks need 0 < low <= high <= 1, got low={low}, high={high}")
        self.capacity = capacity
        self.high = high
        self.low = low
        self.name = name or self.kind
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.used_bytes = 0
        self.evictions = 0
        self.hits = 0

    # --- storage, implemented by each backend -------------------------------------------------
    @abstractmethod
    def get(self, key: Hashable) -> Any | None:
        """The payload, or None when absent (or unreadable)."""

    @abstractmethod
    def put(self, key: Hashable, payload: Any) -> int:
        """Store a payload (replacing any old one) and return its size in bytes."""

    @abstractmethod
    def delete(self, key: Hashable) -> bool:
        """Remove a key; True if it was there."""

    @abstractmethod
    def __contains__(self, key: object) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def keys(self) -> Iterator[Hashable]: ...

    @abstractmethod
    def size_of(self, payload: Any) -> int:
        """Bytes this tier would charge for ``payload``."""

    # --- batch variants: backends with round trips override these -------------------------------
    def get_many(self, keys: Iterable[Hashable]) -> list[Any | None]:
        return [self.get(k) for k in keys]

    def put_many(self, items: Iterable[tuple[Hashable, Any]]) -> int:
        return sum(self.put(k, p) for k, p in items)

    def delete_many(self, keys: Iterable[Hashable]) -> int:
        return sum(self.delete(k) for k in keys)

    def contains_many(self, keys: Iterable[Hashable]) -> list[bool]:
        return [k in self for k in keys]

    # --- watermarks -------------------------------------------------------------------------------
    def over_high(self) -> bool:
        return self.used_bytes > self.high * self.capacity

    def bytes_over_low(self) -> int:
        """Bytes to free to come back down to the low watermark."""
        return max(0, self.used_bytes - int(self.low * self.capacity))

    def free_bytes(self) -> int:
        return self.capacity - self.used_bytes

    def close(self) -> None:
        """Release resources; further use is undefined."""

    def stats(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "policy": self.policy.name,
            "blocks": len(self),
            "bytes": self.used_bytes,
            "capacity": self.capacity,
            "hits": self.hits,
            "evictions": self.evictions,
        }
