"""The engine: one owner for placement and accounting.

- ``slot.py``: ``Slot`` (one tier + its policy + its limits and counters: the only code that
  changes a tier's accounting) and ``Counters`` (the engine's event counters).
- ``placement.py``: where a block lives; room-making, demotion, eviction, promotion, discovery.
- ``lookup.py``: the lookup phases and ``Match``; ``store.py``: the store.
- ``mover.py``: the background writer for slow tiers.
- ``factory.py``: config -> tiers -> slots.
- ``options.py``: ``EngineOptions``, the keyword options of ``Engine`` (and of ``ContextCache``).
- ``core.py``: ``Engine``, which ties them together under one lock.

The engine knows no HTTP and no simulator; tiers know nothing of it.
"""

from .core import Engine
from .lookup import Match
from .options import EngineOptions
from .placement import LOST
from .slot import Counters, Slot

__all__ = ["LOST", "Counters", "Engine", "EngineOptions", "Match", "Slot"]
