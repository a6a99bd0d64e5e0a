"""PendingDeletes: the semantic store's deletes that may not have landed, kept until one does.

A Redis delete can fail (server down, a timeout, a refusal) after the entry has left the cache's
memory, while its record may survive; the cache rebuilds itself from the store at start-up, so a
forgotten failure would bring an erased entry back. The store keeps each such key here, retries
it, and leaves it out when it lists entries (see store.py). With a ``journal`` file the set also
survives the process: one line per change (``+hex`` pending, ``-hex`` done), flushed and fsynced
before the erasing call returns, so a restart after a crash during an outage still skips and
deletes what was erased; the file is removed once nothing is pending. Bounded: past ``limit``
keys the oldest is given up (counted in ``dropped``, logged): its record may come back.

Not thread-safe: the store guards it with its own lock.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("ctxcache.semantic")


class PendingDeletes:
    def __init__(self, journal: str | os.PathLike[str] | None = None, *, limit: int = 100_000, fsync: bool = True):
        if limit < 1:
            raise ValueError(f"the pending-delete limit must be at least 1, got {limit!r}")
        self.journal = None if journal is None else Path(journal).expanduser()
        self.limit, self.fsync = limit, fsync
        self._keys: dict[bytes, None] = {}  # insertion order: the oldest is given up first
        self._lines = 0  # lines in the journal file, to know when compacting pays
        self.failed = self.confirmed = self.dropped = self.journal_errors = 0
        self.loaded = self._load()

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def keys(self) -> list[bytes]:
        return list(self._keys)

    def add(self, keys: list[bytes]) -> None:
        """Deletes that failed: remembered (and journaled) before the caller goes on."""
        new = [k for k in keys if k not in self._keys]
        self.failed += len(keys)
        for k in new:
            self._keys[k] = None
        over = list(self._keys)[: max(0, len(self._keys) - self.limit)]
        for k in over:
            del self._keys[k]
        if over:
            self.dropped += len(over)
            log.error("semantic store: %d pending deletes given up (limit %d): their records may come back", len(over),
                      self.limit)  # fmt: skip
        self._write([b"+" + k.hex().encode() for k in new if k in self._keys] + [b"-" + k.hex().encode() for k in over])

    def discard(self, keys: list[bytes], *, confirmed: bool = True) -> None:
        """Deletes that landed (or keys stored again, whose old delete no longer applies)."""
        gone = [k for k in keys if self._keys.pop(k, 0) is None]
        if confirmed:
            self.confirmed += len(gone)
        if not self._keys:
            self._remove_journal()
        elif gone:
            self._write([b"-" + k.hex().encode() for k in gone])

    def stats(self) -> dict[str, Any]:
        return {
            "pending_deletes": len(self._keys),
            "failed_deletes": self.failed,
            "retried_deletes": self.confirmed,
            "dropped_deletes": self.dropped,
            "journal": None if self.journal is None else str(self.journal),
        }

    # --- the journal ---------------------------------------------------------------------------------
    def _load(self) -> int:
        if self.journal is None:
            return 0
        try:
            raw = self.journal.read_bytes()
        except FileNotFoundError:
            return 0
        lines = raw.split(b"\n")[:-1]  # the part after the last newline is a torn append
        for line in lines:
            try:
                key = bytes.fromhex(line[1:].decode("ascii"))
            except (ValueError, UnicodeDecodeError):
                continue
            if line[:1] == b"+":
                self._keys[key] = None
            elif line[:1] == b"-":
                self._keys.pop(key, None)
        self._lines = len(lines)
        for key in list(self._keys)[: max(0, len(self._keys) - self.limit)]:  # a lower limit than before
            del self._keys[key]
            self.dropped += 1
        return len(self._keys)

    def _write(self, lines: list[bytes]) -> None:
        if self.journal is None or not lines:
            return
        try:
            if self._lines > 4 * len(self._keys) + 64:
                self._rewrite()
                return
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            with open(self.journal, "ab") as f:
                f.write(b"\n".join(lines) + b"\n")
                self._sync(f)
            self._lines += len(lines)
        except OSError as exc:
            self.journal_errors += 1
            log.error("semantic store: cannot write the pending-delete journal %s: %s", self.journal, exc)

    def _rewrite(self) -> None:
        assert self.journal is not None
        tmp = self.journal.with_name(self.journal.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(b"+" + k.hex().encode() + b"\n" for k in self._keys))
            self._sync(f)
        os.replace(tmp, self.journal)
        self._lines = len(self._keys)

    def _sync(self, f: Any) -> None:
        f.flush()
        if self.fsync:
            os.fsync(f.fileno())

    def _remove_journal(self) -> None:
        if self.journal is None:
            return
        try:
            self.journal.unlink(missing_ok=True)
            self._lines = 0
        except OSError as exc:
            self.journal_errors += 1
            log.error("semantic store: cannot remove the pending-delete journal %s: %s", self.journal, exc)
