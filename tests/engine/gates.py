"""Gates that hold the mover inside a slow tier's I/O until the test lets it through: ``Gate`` (an
``on_call`` hook, at its first write) and ``GatedDisk`` (a disk whose deletes wait)."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterable
from typing import Any

from ctxcache.tiers import DiskTier


class Gate:
    """Holds the mover inside its first write until opened (``on_call`` runs in the mover)."""

    def __init__(self) -> None:
        self.entered, self.open = threading.Event(), threading.Event()

    def __call__(self, name: str, keys: tuple[Hashable, ...]) -> None:
        if name == "put_blobs":
            self.entered.set()
            assert self.open.wait(10), "the test never opened the gate"


class GatedDisk(DiskTier):
    """Its deletes wait for ``gate``, as a slow disk's would; ``waiting`` holds their keys."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.waiting: list[Hashable] = []

    def delete_many(self, keys: Iterable[Hashable]) -> int:
        keys = list(keys)
        if not self.gate.is_set():
            self.waiting += keys
            self.entered.set()
            self.gate.wait(10)
        return super().delete_many(keys)

    def land(self) -> None:
        """The waiting deletes reach the disk now; the mover has not reported them yet."""
        DiskTier.delete_many(self, self.waiting)
        self.waiting.clear()
