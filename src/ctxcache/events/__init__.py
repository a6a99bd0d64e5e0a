"""KV events (docs/events.md): the model here, transports and consumers beside it."""

from .consumer import Consumer, Listener
from .emitter import Emitter, ListSink, Sink
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
from .state import WorkerView

__all__ = [
    "ListSink",
    "Consumer",
    "Emitter",
    "Listener",
    "Sink",
    "WorkerView",
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
