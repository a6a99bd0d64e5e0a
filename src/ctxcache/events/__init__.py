"""KV events (docs/events.md): the model here, transports and consumers beside it."""

from .model import (
    REMOVE_REASONS,
    BlockRemoved,
    BlockStored,
    Event,
    EventBatch,
    Heartbeat,
    TierCleared,
    WorkerStarted,
    new_epoch,
)

__all__ = [
    "REMOVE_REASONS",
    "BlockRemoved",
    "BlockStored",
    "Event",
    "EventBatch",
    "Heartbeat",
    "TierCleared",
    "WorkerStarted",
    "new_epoch",
]
