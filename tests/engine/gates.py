"""A slow tier's ``on_call`` hook that holds the mover inside its first write until the test opens it."""

from __future__ import annotations

import threading
from collections.abc import Hashable


class Gate:
    """Holds the mover inside its first write until opened (``on_call`` runs in the mover)."""

    def __init__(self) -> None:
        self.entered, self.open = threading.Event(), threading.Event()

    def __call__(self, name: str, keys: tuple[Hashable, ...]) -> None:
        if name == "put_blobs":
            self.entered.set()
            assert self.open.wait(10), "the test never opened the gate"
