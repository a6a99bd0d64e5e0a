"""The Tier ABC: a keyed block store that measures the bytes it holds. Storage only.

A tier stores, loads, deletes and sizes blocks, and counts what it alone can see (bytes held,
blocks that failed verification). It knows nothing of policies, of other tiers or of the cache's
counters: the engine (``engine/``) wraps each tier in a ``Slot`` that owns its policy, its
limits and its event counters, and decides what to evict and where victims go.

A tier is built with the limits the engine will enforce for it (``capacity``, ``high``/``low``
watermarks, ``policy``: a name, a mapping or a Policy object) and its write policy (``write``:
"through", every store is queued to it at once as well as kept in the faster tiers; "demote",
it receives blocks only as faster tiers demote them; None, the engine's default for its place).
It keeps them as plain data and never reads them itself; they stay on the constructor so ``ContextCache([MemoryTier(1 << 30), ...])``
reads as it always did.

Capabilities are declared by class flags, never discovered by trying a call:
- ``slow``: storage does I/O. The engine never calls it under its lock: writes and deletes go
  through the background mover, reads happen between the lookup's two locked phases. A slow tier
  is therefore thread-safe on its own (one internal lock around its bookkeeping, I/O outside it).
  It charges a write that has landed through ``landing`` when the engine set it (see there).
- ``persistent``: it can hold blocks this process's index does not know (after a restart, or
  written by another process). The engine probes it for keys missing from the index, verifying
  the token bytes each block carries in its header, and ``adopt``s what it finds.
- ``codec`` (not None): it keeps encoded blobs, so ``get_blob``/``put_blob`` move blocks between
  tiers with the same codec without re-encoding. Tiers without a codec raise NotImplementedError
  from both, and non-persistent tiers from ``adopt``: the engine checks the flag first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..codec import Block, Codec
from ..errors import ConfigError, PayloadError, TierUnavailableError

# (key bytes, the tier's charge for the write): runs the charge; see ``Tier.landing``
Landing = Callable[[bytes, Callable[[], object]], None]
WRITE_MODES = (None, "through", "demote")  # None: the engine picks by the tier's place (see Slot.write)


@dataclass(frozen=True, slots=True)
class BlockMeta:
    """What a block's header records besides its payload: persistent tiers need it to verify and
    re-index a block they hand back."""

    tokens: bytes = b""
    parent: bytes = b""
    depth: int = 0
    tenant: bytes = b""  # the owning tenant's id, which headers carry (erasure, sealing)


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
    ordered_keys: ClassVar[bool] = True  # ``keys()`` lists oldest first (see ``keys``)
    shared: ClassVar[bool] = False  # other processes read what it holds (Redis): write-through by default

    def __init__(
        self,
        capacity: int,
        policy: object = "lru",
        *,
        name: str | None = None,
        high: float = 0.85,
        low: float = 0.70,
        write: str | None = None,
    ) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ConfigError(f"tier capacity must be a positive number of bytes, got {capacity!r}")
        if not 0.0 < low <= high <= 1.0:
            raise ConfigError(f"watermarks need 0 < low <= high <= 1, got low={low}, high={high}")
        if write not in WRITE_MODES:
            raise ConfigError(f'tier {name or self.kind!r}: write must be "through" or "demote", got {write!r}')
        if write == "through" and not self.slow:
            raise ConfigError(
                f'tier {name or self.kind!r}: write = "through" applies to disk and redis tiers; a RAM tier '
                "takes blocks inline from the one above it when that one needs room"
            )
        # Limits the engine's Slot enforces; the tier only carries them.
        self.capacity = capacity
        self.high = high
        self.low = low
        self.policy_spec = policy
        self.write = write
        self.name = name or self.kind
        self.used_bytes = 0  # changed only by the tier, as it stores and drops blocks
        self.corrupt = 0  # blocks that failed verification, were dropped and counted as misses
        self.codec: Codec | None = None  # set by tiers that store encoded blobs
        # Token bytes per block, which encoded headers carry: the engine sets it from block_size.
        self.token_bytes = 1024
        # Set by the engine on the slow tiers its mover writes to. A slow tier charges a write that
        # has landed by calling it with the charge, which the engine runs under its lock together
        # with settling the bytes it reserved for the write, so the block is never counted twice.
        self.landing: Landing | None = None

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
        """Keys held, oldest first where the tier knows ages (``ordered_keys``: the order a policy
        learns them in at start, which matters for persistent tiers); else in no set order."""

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

    def load_many(
        self, keys: Sequence[Hashable], tokens: Sequence[bytes | None], unavailable: set[int] | None = None
    ) -> list[Block | None]:
        """Blocks for ``keys``; a block whose stored token bytes differ from ``tokens[i]`` (when
        given) is a miss. Tiers that keep headers verify; live-object tiers trust the index.

        ``unavailable``: where given, the tier adds the position of each miss it could not read
        because its storage is unreachable right now (a Redis server or Cluster master down or hung,
        a disk read failing with an I/O error): the block may still be stored, the tier keeps
        charging it, and a later load may find it. Every other miss is absent or damaged (lost).
        RAM tiers never add any."""
        return [None if p is None else Block(b"", b"", 0, b"", p, 0) for p in self.get_many(keys)]

    def might_contain_many(self, keys: Sequence[Hashable]) -> list[bool]:
        """False only where the key is surely absent; no I/O (slow tiers answer from memory)."""
        return self.contains_many(keys)

    # --- blob passthrough (``codec`` is not None) ----------------------------------------------
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

    def tenant_of(self, key: Hashable) -> bytes:
        """The owner a held block's header names, where the tier read it without I/O (disk: blocks
        found at start), else b"" (unknown)."""
        return b""

    def stored_keys_of(self, tenant: bytes | None) -> list[bytes] | None:
        """Keys in the tier's storage whose block header names ``tenant`` (None: any tenant),
        including blocks this process never loaded (written by another process or an earlier run). Tiers whose storage
        only this process writes, and which read every header at start, return []. None: the
        storage could not be searched (unreachable)."""
        return []

    def stored_links(self) -> list[tuple[bytes, bytes]] | None:
        """(key, parent key) of every intact block in the tier's storage, read from headers only,
        including blocks this process never indexed: how an invalidation finds a subtree's blocks
        another process (or an earlier run) wrote. [] for tiers whose every block the index knows
        (RAM); None: the storage could not be searched (unreachable)."""
        return []

    def adopt(self, key: Hashable, nbytes: int) -> None:
        """Start charging for a block found in shared storage (``persistent`` tiers only)."""
        raise NotImplementedError(f"tier {self.name!r} is not persistent: it cannot adopt blocks")

    def tombstones(self) -> set[bytes]:
        """Keys of erased blocks a refused delete kept, persisted by an earlier run (BlobTier)."""
        return set()

    def buried(self) -> set[bytes]:
        """The tombstones kept now (BlobTier)."""
        return set()

    def bury(self, keys: Iterable[Hashable]) -> bool:
        """Persist tombstones for ``keys`` (BlobTier); True when kept."""
        return True

    def unbury(self, keys: Iterable[Hashable]) -> None:
        """Their deletes landed: their tombstones go (BlobTier)."""

    @property
    def healthy(self) -> bool:
        """False while the backend is unreachable: the engine then skips the tier."""
        return True

    def close(self) -> None:
        """Release resources; further use is undefined."""

    def stats(self) -> dict[str, Any]:
        """What the storage knows; the engine's Slot adds policy, limits and event counters."""
        return {
            "kind": self.kind,
            "blocks": len(self),
            "bytes": self.used_bytes,
            "corrupt": self.corrupt,
            "healthy": self.healthy,
        }
