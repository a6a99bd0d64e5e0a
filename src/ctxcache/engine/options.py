"""EngineOptions: the keyword options of ``Engine``, named once.

``ContextCache(tiers, **options)`` forwards them as they are, so an option added here (and read in
``Engine.__init__``, which holds the defaults) reaches the facade with its type, and type checkers
check every call of either (PEP 692: ``**options: Unpack[EngineOptions]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from ..units import Clock
from .tenancy import Tenancy


class EngineOptions(TypedDict, total=False):
    """Keyword options of ``ContextCache`` and ``Engine``; each may be left out (default in brackets).

    block_size: tokens per block [256].
    hash: block key hash, "xxh3" or "blake3" (keyed, for keys shared across trust boundaries) ["xxh3"].
    model: part of every namespace: a model fingerprint ["default"].
    salt: part of every namespace: a secret [b""].
    clock: seconds, monotonic; drives time-aware policies and TTLs [time.monotonic].
    promote: copy hits from slower tiers into the top tier [True].
    write_buffer: bytes of RAM that queued writes to slow tiers may hold [256 MiB].
    write_lag: seconds a write-through copy may wait in the mover's queue before stores wait for
        it (what a SIGKILL can lose at most; 0: never wait) [1.0].
    tenancy: the configured tenants (None: one implicit tenant per namespace name) [None].
    erasure_journal: a local file recording erasures not verifiably landed, replayed at start
        (engine/journal.py): the erasure wins a restart even when a tier refused its tombstone [None].
    """

    block_size: int
    hash: str
    model: str
    salt: str | bytes
    clock: Clock
    promote: bool
    write_buffer: int
    write_lag: float
    tenancy: Tenancy | None
    erasure_journal: str | None


def check_options(options: Mapping[str, object]) -> None:
    """Refuse an unknown option as a Python call would (``**options`` would swallow it)."""
    unknown = sorted(set(options) - EngineOptions.__optional_keys__)
    if unknown:
        raise TypeError(
            f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(sorted(EngineOptions.__optional_keys__))}"
        )


def write_lag_of(value: object) -> float:
    """``write_lag`` as seconds: a finite number >= 0 (0: stores never wait for write-through)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise ValueError(f"write_lag must be seconds >= 0 (0: never wait), got {value!r}")
    return float(value)
