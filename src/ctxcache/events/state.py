"""WorkerView: what one worker holds, per tier, after the batches applied so far; and the
snapshot, its binary form (the publisher writes it, a consumer that joins late or falls behind
the stream's trim rebuilds from it).

    snapshot := magic:4 "CXS1"  seq:u64  epoch:str16  stream_id:str16  started:batch  n_tiers:u16
                (tier:str16  n:u32  width:u8  n*width bytes)*

``started`` is the worker's WorkerStarted as a one-event batch (events/codec.py): a consumer that
never saw the start still learns which tiers are shared, and with what store.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from .codec import EventDecodeError, decode_events, encode_events
from .model import BlockRemoved, BlockStored, Event, TierCleared, WorkerStarted

MAGIC = b"CXS1"
_Q, _H, _I = struct.Struct("<Q"), struct.Struct("<H"), struct.Struct("<I")


@dataclass
class WorkerView:
    worker: str
    epoch: str = ""
    seq: int = 0
    tiers: dict[str, set[bytes]] = field(default_factory=dict)
    started: WorkerStarted | None = None

    def apply(self, events: tuple[Event, ...]) -> None:
        tiers = self.tiers
        for ev in events:
            if isinstance(ev, BlockStored):
                held = tiers.get(ev.tier)
                if held is None:  # not setdefault: that builds an empty set for every event
                    held = tiers[ev.tier] = set()
                held.update(ev.keys)
            elif isinstance(ev, BlockRemoved):
                held = tiers.get(ev.tier)
                if held:
                    held.difference_update(ev.keys)
            elif isinstance(ev, TierCleared):
                tiers.pop(ev.tier, None)
            elif isinstance(ev, WorkerStarted):
                self.started, self.tiers = ev, {}
                tiers = self.tiers

    def blocks(self) -> int:
        return sum(len(s) for s in list(self.tiers.values()))  # list(): read from other threads

    def store_of(self, tier: str) -> str | None:
        """The shared store behind ``tier`` (WorkerStarted.stores), None if it is not shared."""
        st = self.started
        if st is None or tier not in st.shared:
            return None
        i = st.shared.index(tier)
        return st.stores[i] if i < len(st.stores) else None


def _s16(s: str) -> bytes:
    b = s.encode()
    return _H.pack(len(b)) + b


def encode_snapshot(view: WorkerView, stream_id: str, tiers: Mapping[str, Collection[bytes]] | None = None) -> bytes:
    """``tiers``: the blocks to write instead of ``view.tiers`` (a publisher that reads them from
    its engine at snapshot time rather than mirroring every batch)."""
    started = encode_events((view.started,)) if view.started is not None else encode_events(())
    out = [MAGIC, _Q.pack(view.seq), _s16(view.epoch), _s16(stream_id), _I.pack(len(started)), started]
    held = view.tiers if tiers is None else tiers
    out.append(_H.pack(len(held)))
    for tier, keys in held.items():
        width = len(next(iter(keys))) if keys else 0
        out += [_s16(tier), _I.pack(len(keys)), bytes((width,)), b"".join(keys)]
    return b"".join(out)


def decode_snapshot(worker: str, data: bytes) -> tuple[WorkerView, str]:
    """The view and the stream id it is current at (entries after it with seq above its seq apply)."""
    mv, pos = memoryview(data), 0

    def take(n: int) -> bytes:
        nonlocal pos
        if pos + n > len(mv):
            raise EventDecodeError("truncated snapshot")
        out = bytes(mv[pos : pos + n])
        pos += n
        return out

    def s16() -> str:
        return take(_H.unpack(take(2))[0]).decode()

    if take(4) != MAGIC:
        raise EventDecodeError("not a ctxcache event snapshot")
    seq = _Q.unpack(take(8))[0]
    epoch, stream_id = s16(), s16()
    started = decode_events(take(_I.unpack(take(4))[0]))
    view = WorkerView(worker, epoch, seq)
    view.started = started[0] if started and isinstance(started[0], WorkerStarted) else None
    for _ in range(_H.unpack(take(2))[0]):
        tier = s16()
        n, width = _I.unpack(take(4))[0], take(1)[0]
        run = take(n * width)
        view.tiers[tier] = {run[i : i + width] for i in range(0, n * width, width)} if width else set()
    return view, stream_id
