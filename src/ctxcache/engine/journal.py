"""ErasureJournal: the engine's own record of erasures that have not verifiably landed, in a local
file, so that the erasure wins after a restart even when the tier that keeps the block refused
its tombstone too (down through the close) or could not be searched at all.

Two kinds of entry: a block key with the names of the tiers whose erasure or TTL delete of it was
refused (the block is still stored there), and a tenant whose last erasure could not search some persistent tiers, with
their names (``Placement.unverified``: blocks of it may be stored there, where nobody looked). At
start the engine treats every journaled key as a tombstone of the tiers it names (never
adopted or discovered there, its delete queued again) and every journaled tenant as unverified in
those tiers (its blocks there are not discovered, and those a disk tier found at start are
deleted) until an erasure of it verifies.

A key leaves a tier's entry when a delete of it lands there (or at close, when that tier is not
marked as keeping its erased blob: ``Placement.erased``); a tenant when an erasure of it verifies. The file is rewritten whole (temp file, fsync,
rename) at each change, as the tiers' tombstones are: changes are rare (refused deletes, outages).
Bounded by ``MAX_ENTRIES``; a write that fails is logged and tried again at the next change and at
close (the tiers' own journals still hold what they could write). Thread-safe (its own lock).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path

from ..tiers.base import key_bytes

MAX_ENTRIES = 65536
log = logging.getLogger("ctxcache.engine")


class ErasureJournal:
    def __init__(self, path: str | os.PathLike[str], fsync: bool = True) -> None:
        self.path = Path(path).expanduser()
        self.fsync = fsync
        self._lock = threading.Lock()
        self.keys: dict[bytes, set[str]] = {}  # key -> names of the tiers that may keep its erased blob
        self.tenants: dict[bytes, set[str]] = {}  # tenant -> the names of the tiers not searched
        self._dirty = False  # a change not written yet (the last write failed)
        try:
            for line in self.path.read_text().split("\n"):
                kind, _, value = line.partition(" ")
                if kind == "k" and value:
                    key, _, names = value.partition(" ")
                    self.keys[bytes.fromhex(key)] = {bytes.fromhex(n).decode() for n in names.split(",") if n}
                elif kind == "t" and value:
                    tenant, _, names = value.partition(" ")
                    self.tenants[bytes.fromhex(tenant)] = {bytes.fromhex(n).decode() for n in names.split(",") if n}
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning("erasure journal %s unreadable (%s): erasures it held may not be replayed", self.path, exc)

    def add(self, keys: Iterable[tuple[Hashable, str]] = (), tenants: Mapping[bytes, set[str]] | None = None) -> bool:
        """Journal each (key, tier name) of ``keys``, and each tenant of ``tenants`` unverified in
        those tiers (replacing what an earlier erasure of it left: the later one searched the others)."""
        with self._lock:
            new_k = [(key_bytes(k), n) for k, n in keys if n not in self.keys.get(key_bytes(k), ())]
            new_t = {t: set(n) for t, n in (tenants or {}).items() if self.tenants.get(t) != n}
            room = MAX_ENTRIES - len(self.keys) - len(self.tenants)
            if len({k for k, _ in new_k} - set(self.keys)) > room:
                log.warning("erasure journal %s full: keys not kept", self.path)
                new_k = [(k, n) for k, n in new_k if k in self.keys][: max(0, room)]
            if not new_k and not new_t and not self._dirty:
                return True
            for k, n in new_k:
                self.keys.setdefault(k, set()).add(n)
            self.tenants.update(new_t)
            return self._write()

    def remove(self, keys: Iterable[tuple[Hashable, str]] = (), tenants: Iterable[bytes] = ()) -> None:
        with self._lock:
            gone_k = [(key_bytes(k), n) for k, n in keys if n in self.keys.get(key_bytes(k), ())]
            gone_t = set(tenants) & set(self.tenants)
            if not gone_k and not gone_t and not self._dirty:
                return
            for k, n in gone_k:
                self.keys[k].discard(n)
                if not self.keys[k]:
                    del self.keys[k]
            for t in gone_t:
                del self.tenants[t]
            self._write()

    def _write(self) -> bool:
        try:
            if not self.keys and not self.tenants:
                self.path.unlink(missing_ok=True)
            else:
                tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                lines = [f"t {t.hex()} {','.join(n.encode().hex() for n in sorted(names))}\n"
                         for t, names in sorted(self.tenants.items())]  # fmt: skip
                lines += [f"k {k.hex()} {','.join(n.encode().hex() for n in sorted(names))}\n"
                          for k, names in sorted(self.keys.items())]  # fmt: skip
                with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
                    fh.write("".join(lines))
                    if self.fsync:
                        fh.flush()
                        os.fsync(fh.fileno())
                os.replace(tmp, self.path)
        except OSError as exc:
            self._dirty = True
            log.warning("erasure journal %s not written (%s): retried at the next change", self.path, exc)
            return False
        self._dirty = False
        return True
