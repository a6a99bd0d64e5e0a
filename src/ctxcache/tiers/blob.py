"""BlobTier: the shared base of tiers that keep codec blobs in external storage (disk, Redis).

It owns the one piece of bookkeeping both need: which keys this process charges for and how many
bytes each takes (``_sizes``), guarded by one lock, since slow tiers are called from the mover
thread and from lookups at once. Subclasses do the I/O: ``load_many``, ``put_blobs`` (or
``put_blob``), ``delete``; they call ``_charge`` when a key appears or goes (``_landed`` when a
write has reached storage). ``persistent`` tiers may ``adopt`` blocks found in storage that
another run or process wrote.

Tombstones: the keys of blocks an erasure or a TTL deleted whose delete the tier refused (the
block is still stored). Kept in memory here, persisted by the subclass (``_load_dead``,
``_save_dead``: disk a file in its directory, Redis a set), so a restarted engine deletes those
blocks instead of adopting them (engine/tombstones.py). At most ``MAX_TOMBSTONES``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

from ..codec import Codec
from ..errors import TierUnavailableError
from .base import NO_META, BlockMeta, Tier, key_bytes

MAX_TOMBSTONES = 65536  # 16-byte keys: about 2 MB as a disk file
log = logging.getLogger("ctxcache.tiers")


class BlobTier(Tier):
    slow = True
    persistent = True

    def __init__(
        self,
        capacity: int,
        policy: object = "lru",
        *,
        codec: str = "raw",
        compression: str = "none",
        compression_level: int | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(capacity, policy, **kw)
        self.codec = self._codec = Codec(codec, compression, compression_level)
        self._lock = threading.Lock()
        self._sizes: dict[bytes, int] = {}  # key -> blob size, oldest first
        self._dead: set[bytes] = set()  # tombstones (see the module's docstring)
        self._dead_lock = threading.Lock()  # held across their I/O: the mover and close() write them

    # --- the one key -> size bookkeeping ------------------------------------------------------------
    def _charge(self, kb: bytes, size: int | None) -> int | None:
        """Charge ``size`` bytes for ``kb`` (None: stop charging). Returns the old charge."""
        with self._lock:
            old = self._sizes.pop(kb, None)
            self.used_bytes -= old or 0
            if size is not None:
                self._sizes[kb] = size
                self.used_bytes += size
            return old

    def _landed(self, kb: bytes, size: int) -> None:
        """A write of ``kb`` reached storage: charge it, through ``landing`` when the engine set it.
        Called with no lock held (the engine's hook takes the engine's lock, then ours)."""
        if self.landing is None:
            self._charge(kb, size)
        else:
            self.landing(kb, lambda: self._charge(kb, size))

    def forget(self, key: Hashable) -> None:
        self._charge(key_bytes(key), None)

    def adopt(self, key: Hashable, nbytes: int) -> None:
        kb = key_bytes(key)
        with self._lock:
            if kb in self._sizes:
                return
        self._charge(kb, nbytes)

    def nbytes(self, key: Hashable) -> int:
        return self._sizes.get(key_bytes(key), 0)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, (bytes, str)) and key_bytes(key) in self._sizes

    def contains_many(self, keys: Iterable[Hashable]) -> list[bool]:
        return [k in self for k in keys]

    def __len__(self) -> int:
        return len(self._sizes)

    def keys(self) -> Iterator[Hashable]:
        with self._lock:
            return iter(list(self._sizes))

    # --- tombstones ---------------------------------------------------------------------------------
    def tombstones(self) -> set[bytes]:
        """The tombstones an earlier run persisted; read once, at start (empty if unreadable)."""
        with self._dead_lock:
            try:
                self._dead = set(self._load_dead())
            except (OSError, TierUnavailableError) as exc:
                log.warning(
                    "tier %r: tombstones unreadable (%s): erased blocks a refused delete kept may be served",
                    self.name,
                    exc,
                )
            return set(self._dead)

    def buried(self) -> set[bytes]:
        with self._dead_lock:
            return set(self._dead)

    def bury(self, keys: Iterable[Hashable]) -> bool:
        """Persist tombstones for ``keys``; False if storage refused (the caller tries again later)."""
        with self._dead_lock:
            new = {key_bytes(k) for k in keys} - self._dead
            if not new:
                return True
            room = MAX_TOMBSTONES - len(self._dead)
            if len(new) > room:
                log.warning("tier %r: tombstones full (%d): %d not kept", self.name, MAX_TOMBSTONES, len(new) - room)
                new = set(sorted(new)[:room])
            try:
                self._save_dead(self._dead | new)
            except (OSError, TierUnavailableError):
                return False
            self._dead |= new
            return True

    def unbury(self, keys: Iterable[Hashable]) -> None:
        """Their deletes landed: drop their tombstones (no I/O unless one was kept)."""
        if not self._dead:
            return
        with self._dead_lock:
            gone = {key_bytes(k) for k in keys} & self._dead
            if not gone:
                return
            try:
                self._save_dead(self._dead - gone)
            except (OSError, TierUnavailableError):
                return  # kept: deleted again after a restart, a no-op
            self._dead -= gone

    def _load_dead(self) -> Iterable[bytes]:
        return ()  # nothing persisted: kept in memory only

    def _save_dead(self, dead: set[bytes]) -> None:
        pass

    # --- payloads through the codec ------------------------------------------------------------------
    def size_of(self, payload: Any) -> int:
        return self._codec.encoded_size(payload, 16, self.token_bytes)

    def get(self, key: Hashable) -> Any | None:
        block = self.load_many([key], [None])[0]
        return None if block is None else block.payload

    def put(self, key: Hashable, payload: Any, meta: BlockMeta = NO_META) -> int:
        kb = key_bytes(key)
        return self.put_blob(kb, self._codec.encode(payload, kb, meta.tokens, meta.parent, meta.depth, meta.tenant))

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["codec"] = self._codec.mode
        return out
