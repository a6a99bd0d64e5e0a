"""Slow tiers whose faults come from the simulation's seed, and whose calls are the points where
the harness interleaves requests with the mover's I/O.

- ``SimRedis``: a fake Redis (or Redis Cluster: keys on 3 "masters" by their last byte) over a
  ``backend`` dict the harness keeps across restarts, as a Redis server outlives the cache
  process. At start it charges nothing (as the real tier: blocks there are found by discovery).
- ``SimDisk``: a real ``DiskTier`` in a directory the harness reopens after a restart, with
  refused writes and deletes, read errors (EIO) and a whole-disk outage.

Both call ``faults.point(tier, what)`` before a write batch, after each write lands and before a
delete batch: the harness runs requests there (a slow write is one during which other requests
run) and checks its invariants. Every fault is drawn from ``faults.rng``, which the harness seeds
per action, so a run is a pure function of its seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from ctxcache.codec import Block, read_header
from ctxcache.errors import CorruptBlockError, DeleteFailedError, TierUnavailableError
from ctxcache.tiers.base import key_bytes
from ctxcache.tiers.blob import BlobTier
from ctxcache.tiers.disk import DiskTier

MASTERS = 3


class Faults:
    """One tier's fault switches (set by the harness's fault actions) and per-call draws."""

    def __init__(self) -> None:
        self.rng = random.Random(0)
        self.p_write = 0.0  # chance a write is refused
        self.p_delete = 0.0  # chance a delete is refused
        self.down = False  # the whole tier unreachable
        self.masters_down: set[int] = set()  # Cluster masters unreachable (SimRedis)
        self.point: Callable[[Any, str], None] = lambda tier, what: None
        self.on_refused_write: Callable[[bytes], None] = lambda kb: None
        # Keys a refusal may have kept where they were (docs/storage.md): a refused delete keeps the
        # block; a refused demotion write, or a demotion's read of its source refused (the tier or
        # its master down), keeps it in its source. Shared by every tier of a run.
        self.kept: set[bytes] = set()

    def refuse_write(self, kb: bytes, forced: bool = False) -> bool:
        if forced or (self.p_write and self.rng.random() < self.p_write):
            self.kept.add(kb)
            self.on_refused_write(kb)
            return True
        return False

    def refuse_journal(self) -> bool:
        """A tombstone journal write (engine/tombstones.py): refused as a block write would be, but
        kept nothing and lost nothing."""
        return self.down or bool(self.p_write and self.rng.random() < self.p_write)

    def refuse_delete(self, kb: bytes, forced: bool = False) -> bool:
        if forced or (self.p_delete and self.rng.random() < self.p_delete):
            self.kept.add(kb)
            return True
        return False


def master(kb: bytes) -> int:
    return kb[-1] % MASTERS


class SimRedis(BlobTier):
    kind = "sim-redis"
    shared = True  # as RedisTier: other processes read it

    def __init__(self, capacity: int, policy: object = "lru", *, backend: dict[bytes, bytes], faults: Faults,
                 dead: set[bytes], **kw: Any) -> None:  # fmt: skip
        super().__init__(capacity, policy, **kw)
        self.backend = backend
        self.faults = faults
        self.dead_store = dead  # the tombstone set (a Redis set on master 0), kept across restarts

    def _load_dead(self) -> set[bytes]:
        if self.faults.down or 0 in self.faults.masters_down:
            raise TierUnavailableError("sim-redis: unreachable")
        return set(self.dead_store)

    def _save_dead(self, dead: set[bytes]) -> None:
        if self.faults.refuse_journal() or 0 in self.faults.masters_down:
            raise TierUnavailableError("sim-redis: tombstones not written")
        self.dead_store.clear()
        self.dead_store.update(dead)

    def reachable(self, kb: bytes) -> bool:
        return not self.faults.down and master(kb) not in self.faults.masters_down

    @property
    def healthy(self) -> bool:  # as the real tier: healthy while any master answers
        return not self.faults.down and len(self.faults.masters_down) < MASTERS

    def load_many(
        self, keys: Sequence[Hashable], tokens: Sequence[bytes | None], unavailable: set[int] | None = None
    ) -> list[Block | None]:
        out: list[Block | None] = []
        for i, (key, want) in enumerate(zip(keys, tokens)):
            kb = key_bytes(key)
            if not self.reachable(kb):
                if unavailable is not None:
                    unavailable.add(i)
                out.append(None)
                continue
            block = self._decode(kb)
            if block is None:
                self._charge(kb, None)  # gone or bad, as the real tier
            out.append(None if block is None or (want is not None and block.tokens != want) else block)
        return out

    def _decode(self, kb: bytes, drop: bool = True) -> Block | None:
        blob = self.backend.get(kb)
        if blob is None:
            return None
        try:
            return self._codec.decode(blob, kb)
        except CorruptBlockError:
            self.corrupt += 1
            if drop:  # the real tier's load_many deletes a corrupt value (its get_blob leaves it)
                del self.backend[kb]
            return None

    def get_blob(self, key: Hashable) -> bytes | None:
        kb = key_bytes(key)
        if not self.reachable(kb):  # a demotion's source read refused: the block stays there
            self.faults.kept.add(kb)
            return None
        if self._decode(kb, drop=False) is None:
            return None
        return self.backend[kb]

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        self.faults.point(self, "write")
        out = []
        for key, blob in items:
            kb = key_bytes(key)
            if self.faults.refuse_write(kb, forced=not self.reachable(kb)):
                out.append(False)
                continue
            self.backend[kb] = bytes(blob)
            self._landed(kb, len(blob))
            out.append(True)
            self.faults.point(self, "landed")
        return out

    def put_blob(self, key: Hashable, blob: bytes) -> int:
        if not self.put_blobs([(key, blob)])[0]:
            raise OSError("sim-redis: write refused")
        return len(blob)

    def delete_many(self, keys: Iterable[Hashable]) -> int:
        keys = list(keys)
        self.faults.point(self, "delete")
        failed, deleted = [], 0
        for key in keys:
            kb = key_bytes(key)
            if self.faults.refuse_delete(kb, forced=not self.reachable(kb)):
                failed.append(key)
                continue
            self._charge(kb, None)
            deleted += self.backend.pop(kb, None) is not None
        if failed:
            raise DeleteFailedError(f"sim-redis: {len(failed)} of {len(keys)} deletes failed", failed, deleted)
        return deleted

    def delete(self, key: Hashable) -> bool:
        return self.delete_many([key]) == 1

    def might_contain_many(self, keys: Sequence[Hashable]) -> list[bool]:
        return [self.healthy and key_bytes(k) in self.backend for k in keys]

    def stored_keys_of(self, tenant: bytes | None) -> list[bytes] | None:
        if self.faults.down or self.faults.masters_down:
            return None
        found = []
        for kb, blob in list(self.backend.items()):
            try:
                h = read_header(blob)
            except CorruptBlockError:
                continue
            if tenant is None or h.tenant == tenant:
                found.append(kb)
        return found

    def stored(self) -> dict[bytes, bytes]:
        return self.backend


class SimDisk(DiskTier):
    kind = "sim-disk"

    def __init__(self, capacity: int, policy: object = "lru", *, faults: Faults, **kw: Any) -> None:
        self.faults = faults
        super().__init__(capacity, policy, fsync=False, **kw)

    @property
    def healthy(self) -> bool:
        return not self.faults.down

    def _load_dead(self) -> list[bytes]:
        if self.faults.down:
            raise OSError(5, "Input/output error")
        return super()._load_dead()

    def _save_dead(self, dead: set[bytes]) -> None:
        if self.faults.refuse_journal():
            raise OSError(28, "No space left on device")
        super()._save_dead(dead)

    def _read(self, kb: bytes) -> bytes | None:
        if self.faults.down:
            raise OSError(5, "Input/output error")
        return super()._read(kb)

    def get_blob(self, key: Hashable) -> bytes | None:
        if self.faults.down:  # a demotion's source read refused (EIO): the block stays there
            self.faults.kept.add(key_bytes(key))
        return super().get_blob(key)

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        self.faults.point(self, "write")
        return super().put_blobs(items)

    def put_blob(self, key: Hashable, blob: bytes) -> int:
        if self.faults.refuse_write(key_bytes(key), forced=self.faults.down):
            raise OSError(28, "No space left on device")
        return super().put_blob(key, blob)

    def _landed(self, kb: bytes, size: int) -> None:
        super()._landed(kb, size)
        self.faults.point(self, "landed")

    def delete_many(self, keys: Iterable[Hashable]) -> int:
        keys = list(keys)
        self.faults.point(self, "delete")
        return sum(self.delete(k) for k in keys)

    def delete(self, key: Hashable) -> bool:
        if self.faults.refuse_delete(key_bytes(key), forced=self.faults.down):
            raise OSError(5, "Input/output error")
        return super().delete(key)

    def stored(self) -> dict[bytes, bytes]:
        out = {}
        for shard in self._blocks.iterdir():
            for f in shard.glob("*.blk"):
                out[bytes.fromhex(f.name[:-4])] = f.read_bytes()
        return out

    def corrupt_file(self, kb: bytes) -> None:
        p = self._path(kb)
        data = bytearray(p.read_bytes())
        data[-1] ^= 0xFF
        p.write_bytes(bytes(data))
