"""The Tier ABC: a keyed block store with capacity, watermarks and an eviction policy.

A tier owns storage and byte accounting; its ``policy`` only orders keys. The ContextCache
decides when to evict (watermarks) and where a victim goes (demotion to the next tier, or out of
the cache), because only it knows the radix index's rules.

Two class flags tell the cache how to drive a tier:
- ``slow``: storage does I/O. The cache never calls it under its lock: writes and deletes go
  through the background mover, reads happen between the lookup's two locked phases. A slow tier
  is therefore thread-safe on its own (one internal lock around its bookkeeping, I/O outside it).
- ``persistent``: it can hold blocks this process's index does not know (after a restart, or
  written by another process). The cache probes it for keys missing from the index, verifying the
  token bytes each block carries in its header.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..codec import Block, Codec
from ..errors import ConfigError, PayloadError, TierUnavailableError
from ..policies import Policy, make_policy


@dataclass(frozen=True, slots=True)
class BlockMeta:
    """What a block's header records besides its payload: persistent tiers need it to verify and
    re-index a block they hand back."""

    tokens: bytes = b""
    parent: bytes = b""
    depth: int = 0


NO_META = BlockMeta()


def key_bytes(key: Hashable) -> bytes:
    """The bytes a serialized tier files a key under (cache keys are 16-byte hashes already)."""
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    raise PayloadError(f"tiers that serialize blocks need bytes or str keys, not {type(key).__name__}")


class Tier(ABC):
    kind: ClassVar[str] = ""
    slow: ClassVar[bool] = False
    persistent: ClassVar[bool] = False

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
        self.corrupt = 0  # blocks that failed verification, were dropped and counted as misses
        self.codec: Codec | None = None  # set by tiers that store encoded blobs
        # Token bytes per block, which encoded headers carry: the cache sets it from block_size.
        self.token_bytes = 1024

    # --- storage, implemented by each backend -------------------------------------------------
    @abstractmethod
    def get(self, key: Hashable) -> Any | None:
        """The payload, or None when absent (or unreadable)."""

    @abstractmethod
    def put(self, key: Hashable, payload: Any, meta: BlockMeta = NO_META) -> int:
        """Store a payload (replacing any old one) and return the bytes it takes."""

    @abstractmethod
    def delete(self, key: Hashable) -> bool:
        """Remove a key; True if it was there."""

    @abstractmethod
    def __contains__(self, key: object) -> bool: ...

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def keys(self) -> Iterator[Hashable]:
        """Keys held, oldest first where the tier knows ages (the order a policy learns them in)."""

    @abstractmethod
    def size_of(self, payload: Any) -> int:
        """Bytes this tier would charge for ``payload`` (an upper bound when compressing)."""

    @abstractmethod
    def nbytes(self, key: Hashable) -> int:
        """Bytes charged for a held key (0 if absent)."""

    # --- batch variants: backends with round trips override these -------------------------------
    def get_many(self, keys: Iterable[Hashable]) -> list[Any | None]:
        return [self.get(k) for k in keys]

    def put_many(self, items: Iterable[tuple[Hashable, Any]]) -> int:
        return sum(self.put(k, p) for k, p in items)

    def delete_many(self, keys: Iterable[Hashable]) -> int:
        return sum(self.delete(k) for k in keys)

    def contains_many(self, keys: Iterable[Hashable]) -> list[bool]:
        return [k in self for k in keys]

    def load_many(self, keys: Sequence[Hashable], tokens: Sequence[bytes | None]) -> list[Block | None]:
        """Blocks for ``keys``; a block whose stored token bytes differ from ``tokens[i]`` (when
        given) is a miss. Tiers that keep headers verify; live-object tiers trust the index."""
        return [None if p is None else Block(b"", b"", 0, b"", p, 0) for p in self.get_many(keys)]

    def might_contain_many(self, keys: Sequence[Hashable]) -> list[bool]:
        """False only where the key is surely absent; no I/O (slow tiers answer from memory)."""
        return self.contains_many(keys)

    # --- blob passthrough: tiers with a codec move encoded blocks without re-encoding them -----
    def get_blob(self, key: Hashable) -> bytes | None:
        raise NotImplementedError(f"tier {self.name!r} does not store encoded blocks")

    def put_blob(self, key: Hashable, blob: bytes) -> int:
        raise NotImplementedError(f"tier {self.name!r} does not store encoded blocks")

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        """Write several blobs (one round trip where the backend can); True where one was stored."""
        out = []
        for key, blob in items:
            try:
                self.put_blob(key, blob)
                out.append(True)
            except (OSError, TierUnavailableError):
                out.append(False)
        return out

    # --- bookkeeping without I/O -----------------------------------------------------------------
    def forget(self, key: Hashable) -> None:
        """Stop charging for ``key`` without touching storage (it was found missing or bad)."""
        self.delete(key)

    def adopt(self, key: Hashable, nbytes: int) -> None:
        """Start charging for a block found in shared storage (written by another process)."""

    @property
    def healthy(self) -> bool:
        """False while the backend is unreachable: the cache then skips the tier."""
        return True

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
            "corrupt": self.corrupt,
            "healthy": self.healthy,
        }
