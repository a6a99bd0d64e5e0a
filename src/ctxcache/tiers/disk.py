"""DiskTier: one encoded block per file under a sharded directory.

Layout: ``<path>/blocks/<first key byte, hex>/<key hex>.blk``, temp files in ``<path>/tmp``, and a
``LOCK`` file. Writes are atomic: the blob goes to a temp file, is fsynced, then renamed over the
final name, so a reader (or a process restarted after a crash) sees the old block, the new
block, or nothing, never a torn one. Data is fsynced before the rename, so a rename that survives
a power loss points at complete data; the directory is not fsynced (a lost rename is a miss).

On start the index (key -> size) is rebuilt by reading every file's header: a file whose header
fails its checksum, names another key, or whose length differs from what its header says
(truncated) is deleted and counted in ``corrupt``. Payload checksums are verified on each load;
a block that fails is deleted, counted and returned as a miss. The index is exact, so lookups of
absent keys cost no I/O (no Bloom filter needed).

One process owns a directory at a time (an exclusive ``flock`` on LOCK; a second opener gets a
ConfigError); the lock dies with its process, so a SIGKILLed owner leaves nothing to clean but
temp files, which the next owner removes. Thread-safe: the key -> size index and its lock are BlobTier's;
file I/O happens outside the lock.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from ..codec import FIXED_HEADER_SIZE, Block, header_length, read_header
from ..errors import ConfigError, CorruptBlockError
from .base import key_bytes
from .blob import BlobTier


def _private(root: Path) -> None:
    """Blocks hold token ids, which decode back to prompt text: only the owner may read them.

    A directory that another user owns or may write to could have blocks planted or swapped in
    (and read out), so it is refused; one that is merely readable by others is tightened.
    """
    st = root.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        who = (
            "another user owns it"
            if st.st_uid != os.getuid()
            else f"others may write to it (mode {st.st_mode & 0o777:o})"
        )
        raise ConfigError(
            f"disk tier path {str(root)!r} is not private: {who}; use a directory of your own, or `chmod 700 {root}`"
        )
    if st.st_mode & 0o077:
        root.chmod(0o700)


class DiskTier(BlobTier):
    kind = "disk"

    def __init__(
        self,
        capacity: int,
        policy: Any = "lru",
        *,
        path: str | os.PathLike[str] | None = None,
        fsync: bool = True,
        **kw: Any,
    ) -> None:
        super().__init__(capacity, policy, **kw)
        if path is None:
            raise ConfigError("a disk tier needs a 'path' (a directory it may own)")
        self.fsync = bool(fsync)
        self.root = Path(path).expanduser()
        self._blocks, self._tmp = self.root / "blocks", self.root / "tmp"
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            _private(self.root)
            self._blocks.mkdir(mode=0o700, exist_ok=True)
            self._tmp.mkdir(mode=0o700, exist_ok=True)
            self._lock_fd = os.open(self.root / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(f"disk tier path {str(self.root)!r} is not usable: {exc}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise ConfigError(f"disk tier path {str(self.root)!r} is in use by another process") from None
        self.recovered = 0
        self._found_tenants: dict[bytes, bytes] = {}  # owners of blocks found at start (headers)
        self._rebuild()

    # --- start-up ----------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        for tmp in self._tmp.iterdir():  # left by a writer that died before its rename
            tmp.unlink(missing_ok=True)
        found: list[tuple[int, bytes, int, bytes]] = []
        for shard in sorted(self._blocks.iterdir()):
            for f in shard.glob("*.blk"):
                entry = self._check(f)
                if entry is None:
                    self.corrupt += 1
                    f.unlink(missing_ok=True)
                else:
                    found.append(entry)
        for _, key, size, tenant in sorted(found):
            self._charge(key, size)
            if tenant:
                self._found_tenants[key] = tenant
        self.recovered = len(found)

    def _load_dead(self) -> list[bytes]:
        try:
            text = (self.root / "tombstones").read_text()
        except FileNotFoundError:
            return []
        return [bytes.fromhex(line) for line in text.split() if line]

    def _save_dead(self, dead: set[bytes]) -> None:
        """Atomically, as a block (temp file, fsync, rename); none left: the file goes."""
        final = self.root / "tombstones"
        if not dead:
            final.unlink(missing_ok=True)
            return
        tmp = self._tmp / f"tombstones.{os.getpid()}.tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            fh.write("".join(f"{kb.hex()}\n" for kb in sorted(dead)))
            if self.fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, final)

    def _check(self, f: Path) -> tuple[int, bytes, int, bytes] | None:
        """(mtime, key, size, tenant) of a file whose header is intact and whose length matches it."""
        try:
            with f.open("rb", buffering=0) as fh:
                st = os.fstat(fh.fileno())
                prefix = fh.read(FIXED_HEADER_SIZE)
                head = prefix + fh.read(max(0, header_length(prefix) - len(prefix)))
            h = read_header(head)
            if h.total_len != st.st_size or h.key.hex() + ".blk" != f.name:
                return None
            return st.st_mtime_ns, h.key, st.st_size, h.tenant
        except (OSError, CorruptBlockError):
            return None

    # --- paths and raw I/O ------------------------------------------------------------------------
    def _path(self, kb: bytes) -> Path:
        return self._blocks / kb[:1].hex() / f"{kb.hex()}.blk"

    def _read(self, kb: bytes) -> bytes | None:
        try:
            with self._path(kb).open("rb", buffering=0) as fh:
                return fh.read()  # sized from fstat, read into an uninitialised buffer: one copy
        except FileNotFoundError:
            return None

    def _write(self, kb: bytes, blob: Any) -> int:
        final = self._path(kb)
        tmp = self._tmp / f"{kb.hex()}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb", buffering=0) as fh:
                fh.write(blob)
                if self.fsync:
                    os.fsync(fh.fileno())
            try:
                os.replace(tmp, final)
            except FileNotFoundError:  # first block of its shard
                final.parent.mkdir(mode=0o700, exist_ok=True)
                os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        size = len(memoryview(blob))
        self._landed(kb, size)
        return size

    def _drop(self, kb: bytes, unlink: bool) -> bool:
        size = self._charge(kb, None)
        if unlink:
            try:
                self._path(kb).unlink()
                return True
            except FileNotFoundError:
                pass
        return size is not None

    def _verified(self, kb: bytes) -> tuple[Block, bytes] | None:
        buf = self._read(kb)
        if buf is None:
            self._drop(kb, unlink=False)
            return None
        try:
            return self._codec.decode(buf, kb), buf
        except CorruptBlockError:
            with self._lock:
                self.corrupt += 1
            self._drop(kb, unlink=True)
            return None

    # --- the Tier interface -----------------------------------------------------------------------
    def load_many(
        self, keys: Sequence[Hashable], tokens: Sequence[bytes | None], unavailable: set[int] | None = None
    ) -> list[Block | None]:
        out: list[Block | None] = []
        for i, (key, want) in enumerate(zip(keys, tokens)):
            try:
                got = self._verified(key_bytes(key))
            except OSError:  # not "no such file" (a miss): EIO, EACCES, a stale mount; the file may be intact
                got = None
                if unavailable is not None:
                    unavailable.add(i)
            out.append(None if got is None or (want is not None and got[0].tokens != want) else got[0])
        return out

    def get_blob(self, key: Hashable) -> bytes | None:
        got = self._verified(key_bytes(key))
        return None if got is None else got[1]

    def put_blob(self, key: Hashable, blob: bytes) -> int:
        return self._write(key_bytes(key), blob)

    def delete(self, key: Hashable) -> bool:
        return self._drop(key_bytes(key), unlink=True)

    def forget(self, key: Hashable) -> None:
        self._drop(key_bytes(key), unlink=False)

    def stored_links(self) -> list[tuple[bytes, bytes]] | None:
        """Every block's header read again (blocks an earlier run left are charged, not indexed:
        their parents are only on disk). A file gone meanwhile, or damaged, is skipped."""
        out = []
        for key in list(self.keys()):
            kb = key_bytes(key)
            try:
                with self._path(kb).open("rb", buffering=0) as fh:
                    prefix = fh.read(FIXED_HEADER_SIZE)
                    h = read_header(prefix + fh.read(max(0, header_length(prefix) - len(prefix))))
            except FileNotFoundError:
                continue
            except CorruptBlockError:
                continue  # a load finds it damaged and drops it; nothing in it can be attributed
            except OSError:
                return None  # EIO, a stale mount: the file may be intact, the search is incomplete
            if h.key == kb:
                out.append((h.key, h.parent))
        return out

    def tenant_of(self, key: Hashable) -> bytes:
        return self._found_tenants.get(key_bytes(key), b"")

    def close(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out.update(path=str(self.root), recovered=self.recovered)
        return out
