"""KV events: what a worker tells the fleet about where its blocks are.

One worker (a ``ctxcache serve`` process, or a vLLM worker running the connector) publishes
batches of these. Consumers (other workers' Redis-tier filters, the router's index) apply them
in sequence order per (worker, epoch). The model is transport-free: ``events/streams.py``
(Redis Streams) and ``events/zmq.py`` (vLLM's KV-event wire format) encode the same objects.

Privacy: a block is named by its 16-byte chained key only. Keys are hashed under a namespace
root that is derived from the tenant and a secret (keys.py), so a stream reader without the
secret cannot tell tenants apart or recover tokens. ``token_ids`` is opt-in (vLLM-format
consumers that recompute their own keys need it) and exposes prompt tokens to every reader.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Literal

# Why a block left a tier. "demoted": it moved to a slower tier (a BlockStored for that tier
# follows once the write lands); the others mean the block is gone from that tier.
# New reasons are appended, never reordered: the stream codec sends a reason as its position here.
RemoveReason = Literal["evicted", "demoted", "erased", "expired", "lost", "replaced"]
REMOVE_REASONS: tuple[str, ...] = ("evicted", "demoted", "erased", "expired", "lost", "replaced")


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks now readable from ``tier``: ``keys`` in chain order, ``parent`` the key before
    ``keys[0]`` (None at a namespace root)."""

    keys: tuple[bytes, ...]
    tier: str
    parent: bytes | None = None
    block_size: int = 0  # tokens per block
    size: int = 0  # stored bytes of all the blocks together
    token_ids: tuple[int, ...] | None = None  # opt-in: len(keys) * block_size tokens


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    keys: tuple[bytes, ...]
    tier: str
    reason: RemoveReason = "evicted"


@dataclass(frozen=True, slots=True)
class TierCleared:
    """Everything the worker held in ``tier`` is gone (or unreachable: ``reason="lost"``)."""

    tier: str
    reason: str = "cleared"


@dataclass(frozen=True, slots=True)
class WorkerStarted:
    """First event of every epoch: consumers forget what they knew of this worker's older
    epochs. ``tiers`` lists the worker's tiers, fastest first; ``shared`` those other
    processes read too (a block stored there is a hit for every worker on that store);
    ``stores`` names the store behind each of ``shared`` (``redis://host:port/db#prefix``, no
    credentials), so a consumer matches a shared tier by what it is, not by its name."""

    tiers: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()
    block_size: int = 0
    stores: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Sent when a worker has published nothing for a while, so consumers can tell a quiet
    worker from a dead one."""


Event = BlockStored | BlockRemoved | TierCleared | WorkerStarted | Heartbeat


def new_epoch() -> str:
    """A fresh epoch per process start: wall time plus randomness, so two starts never collide
    (ordering between epochs is not needed: a consumer follows the newest it has seen)."""
    return f"{time.time_ns():x}-{os.urandom(4).hex()}"


@dataclass(frozen=True, slots=True)
class EventBatch:
    """Events from one worker, in order. ``seq`` counts batches within an epoch from 1, without
    gaps: a consumer that sees seq n+2 after n missed one and must replay or resync."""

    worker: str
    epoch: str
    seq: int
    events: tuple[Event, ...] = field(default_factory=tuple)
    ts: float = 0.0  # publisher's wall clock, seconds: for lag metrics only, never for ordering
