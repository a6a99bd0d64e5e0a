"""The binary form of an EventBatch on Redis Streams (docs/events.md, "Stream entries").

Hand-rolled with ``struct`` rather than msgpack or JSON: a consumer decodes 100k+ events a second
per core (benchmarks/fleet/bench_events.py) and the keys, 16 bytes each, go in as one run of
bytes, not one object each. Every integer is little-endian; strings are u8-length-prefixed UTF-8.

    batch   := version:u8  n_events:u32  event*
    event   := kind:u8  body
    stored  := tier:str  flags:u8  [parent:key]  block_size:u32  size:u64  keys  [tokens]
    removed := tier:str  reason:u8  keys
    cleared := tier:str  reason:str
    started := block_size:u32  tiers:strs  shared:strs  stores:strs
    keys    := n:u32  width:u8  n*width bytes
    tokens  := n:u32  n*i32

A version or kind this code does not know raises ``EventDecodeError``: the consumer counts the
entry and resynchronises from the snapshot rather than guess.
"""

from __future__ import annotations

import struct
from array import array
from typing import cast

from .. import accel
from ..errors import CtxCacheError
from .model import (
    REMOVE_REASONS,
    BlockRemoved,
    BlockStored,
    Event,
    Heartbeat,
    RemoveReason,
    TierCleared,
    WorkerStarted,
)

VERSION = 1
K_STORED, K_REMOVED, K_CLEARED, K_STARTED, K_HEARTBEAT = 1, 2, 3, 4, 5
F_PARENT, F_TOKENS = 1, 2
_U32, _U64, _HEAD = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<BI")


class EventDecodeError(CtxCacheError):
    """An entry that is not a batch this version can read."""


def _str(s: str) -> bytes:
    b = s.encode()
    if len(b) > 255:
        raise ValueError(f"event string longer than 255 bytes: {s[:40]!r}...")
    return bytes((len(b),)) + b


def _strs(items: tuple[str, ...]) -> bytes:
    return bytes((len(items),)) + b"".join(_str(s) for s in items)


def _keys(keys: tuple[bytes, ...]) -> bytes:
    width = len(keys[0]) if keys else 0
    if len(set(map(len, keys))) > 1:  # not a generator: this runs for every key the publisher sends
        raise ValueError("the keys of one event must all have one length")
    return _U32.pack(len(keys)) + bytes((width,)) + b"".join(keys)


def encode_events(events: tuple[Event, ...]) -> bytes:
    """The batch's bytes: compiled (native/ctxcache_encode.c) for BlockStored without token ids
    and BlockRemoved, the publisher's every batch; ``encode_events_py`` for the rest, and the
    reference (tests/events/test_native_encode.py checks both)."""
    native = accel.native
    if native is not None and events.__class__ is tuple:
        got = native.encode_events(events, VERSION, BlockStored, BlockRemoved, REMOVE_REASONS)
        if got is not None:
            return cast(bytes, got)
    return encode_events_py(events)


def encode_events_py(events: tuple[Event, ...]) -> bytes:
    out = [_HEAD.pack(VERSION, len(events))]
    for ev in events:
        if isinstance(ev, BlockStored):
            flags = (F_PARENT if ev.parent is not None else 0) | (F_TOKENS if ev.token_ids is not None else 0)
            out += [bytes((K_STORED,)), _str(ev.tier), bytes((flags,))]
            if ev.parent is not None:
                out.append(bytes((len(ev.parent),)) + ev.parent)
            out += [_U32.pack(ev.block_size), _U64.pack(ev.size), _keys(ev.keys)]
            if ev.token_ids is not None:
                out += [_U32.pack(len(ev.token_ids)), array("i", ev.token_ids).tobytes()]
        elif isinstance(ev, BlockRemoved):
            out += [bytes((K_REMOVED,)), _str(ev.tier), bytes((REMOVE_REASONS.index(ev.reason),)), _keys(ev.keys)]
        elif isinstance(ev, TierCleared):
            out += [bytes((K_CLEARED,)), _str(ev.tier), _str(ev.reason)]
        elif isinstance(ev, WorkerStarted):
            out += [bytes((K_STARTED,)), _U32.pack(ev.block_size), _strs(ev.tiers), _strs(ev.shared)]
            out.append(_strs(ev.stores))
        elif isinstance(ev, Heartbeat):
            out.append(bytes((K_HEARTBEAT,)))
        else:  # pragma: no cover - Event is a closed union
            raise TypeError(f"not an event: {ev!r}")
    return b"".join(out)


_TAIL = struct.Struct("<IQIB")  # a BlockStored's block_size, size, key count, key width
_KEYS = struct.Struct("<IB")  # a key run's count and width


class _Reader:
    __slots__ = ("buf", "pos", "names")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = bytes(buf), 0
        self.names: dict[bytes, str] = {}  # tier names repeat in every event: decoded once

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise EventDecodeError("truncated event batch")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def u8(self) -> int:
        if self.pos >= len(self.buf):
            raise EventDecodeError("truncated event batch")
        self.pos += 1
        return self.buf[self.pos - 1]

    def u32(self) -> int:
        return cast(int, _U32.unpack(self.take(4))[0])

    def u64(self) -> int:
        return cast(int, _U64.unpack(self.take(8))[0])

    def text(self) -> str:
        raw = self.take(self.u8())
        name = self.names.get(raw)
        if name is None:
            try:
                name = self.names[raw] = raw.decode()
            except UnicodeDecodeError:
                raise EventDecodeError("an event string is not UTF-8") from None
        return name

    def texts(self) -> tuple[str, ...]:
        return tuple(self.text() for _ in range(self.u8()))

    def keys(self) -> tuple[bytes, ...]:
        n, width = self.u32(), self.u8()
        return self._run(n, width)

    def _run(self, n: int, width: int) -> tuple[bytes, ...]:
        if n and not width:
            raise EventDecodeError("keys of width 0")
        start = self.pos
        self.take(n * width)
        buf = self.buf
        if not n:
            return ()  # an empty run is written with width 0 (codec._keys)
        return tuple(buf[i : i + width] for i in range(start, start + n * width, width))

    def stored(self) -> BlockStored:
        """The hot path (most events): fixed fields in one unpack."""
        tier, flags = self.text(), self.u8()
        parent = self.take(self.u8()) if flags & F_PARENT else None
        try:
            block_size, size, n, width = _TAIL.unpack_from(self.buf, self.pos)
        except struct.error:
            raise EventDecodeError("truncated event batch") from None
        self.pos += _TAIL.size
        keys = self._run(n, width)
        tokens = None
        if flags & F_TOKENS:
            tokens = tuple(array("i", self.take(4 * self.u32())))
        return BlockStored(keys, tier, parent, block_size, size, tokens)


def _removed(r: _Reader) -> BlockRemoved:
    tier, why = r.text(), r.u8()
    if why >= len(REMOVE_REASONS):
        raise EventDecodeError(f"unknown remove reason {why}")
    return BlockRemoved(r.keys(), tier, cast(RemoveReason, REMOVE_REASONS[why]))


def _other(r: _Reader, kind: int) -> Event:
    if kind == K_CLEARED:
        return TierCleared(r.text(), r.text())
    if kind == K_STARTED:
        bs = r.u32()
        return WorkerStarted(r.texts(), r.texts(), bs, r.texts())
    if kind == K_HEARTBEAT:
        return Heartbeat()
    raise EventDecodeError(f"unknown event kind {kind}")


def decode_events_reference(data: bytes) -> tuple[Event, ...]:
    """The readable decoder, one method call per field: ``decode_events`` must agree with it on
    every input (tests/events/test_codec_emitter.py), and the benchmark times both."""
    r = _Reader(data)
    version, n = _HEAD.unpack(r.take(_HEAD.size))
    if version != VERSION:
        raise EventDecodeError(f"event batch version {version}; this ctxcache reads {VERSION}")
    out: list[Event] = []
    for _ in range(n):
        kind = r.u8()
        if kind == K_STORED:
            out.append(r.stored())
        elif kind == K_REMOVED:
            out.append(_removed(r))
        else:
            out.append(_other(r, kind))
    if r.pos != len(r.buf):
        raise EventDecodeError("trailing bytes after the last event")
    return tuple(out)


# BlockStored's slot setters: building one field by field is 3x its frozen __init__ (1.8 µs).
_new = object.__new__
_s_keys, _s_tier, _s_parent, _s_bs, _s_size, _s_tokens = (
    getattr(BlockStored, f).__set__ for f in ("keys", "tier", "parent", "block_size", "size", "token_ids")
)


def _name(names: dict[bytes, str], raw: bytes) -> str:
    try:
        name = names[raw] = raw.decode()
    except UnicodeDecodeError:
        raise EventDecodeError("an event string is not UTF-8") from None
    return name


def _fail(buf: bytes, pos: int) -> EventDecodeError:
    return EventDecodeError("truncated event batch" if pos > len(buf) else "trailing bytes after the last event")


def _head(buf: bytes) -> int:
    if len(buf) < _HEAD.size:
        raise EventDecodeError("truncated event batch")
    version, n = _HEAD.unpack_from(buf, 0)
    if version != VERSION:
        raise EventDecodeError(f"event batch version {version}; this ctxcache reads {VERSION}")
    return cast(int, n)


def decode_events(data: bytes) -> tuple[Event, ...]:
    """``decode_events_reference`` unrolled for the hot kinds (BlockStored, BlockRemoved): fields
    read into locals, a key run cut by one comprehension; bounds checked per key run and at the end."""
    buf = bytes(data)
    end, n = len(buf), _head(buf)
    pos, tail = _HEAD.size, _TAIL.size
    names: dict[bytes, str] = {}
    out: list[Event] = []
    try:
        for _ in range(n):
            kind = buf[pos]
            if kind in (K_STORED, K_REMOVED):
                ln = buf[pos + 1]
                raw = buf[pos + 2 : pos + 2 + ln]
                tier = names.get(raw) or _name(names, raw)
                pos += 2 + ln
                flag = buf[pos]
                if kind == K_REMOVED:
                    if flag >= len(REMOVE_REASONS):
                        raise EventDecodeError(f"unknown remove reason {flag}")
                    k, width = _KEYS.unpack_from(buf, pos + 1)
                    pos += 1 + _KEYS.size
                else:
                    parent = None
                    if flag & F_PARENT:
                        ln = buf[pos + 1]
                        parent = buf[pos + 2 : pos + 2 + ln]
                        pos += 1 + ln
                    block_size, size, k, width = _TAIL.unpack_from(buf, pos + 1)
                    pos += 1 + tail
                stop = pos + k * width
                if stop > end or (k and not width):
                    raise EventDecodeError("truncated event batch" if stop > end else "keys of width 0")
                keys = tuple([buf[i : i + width] for i in range(pos, stop, width)]) if k else ()
                pos = stop
                if kind == K_REMOVED:
                    out.append(BlockRemoved(keys, tier, cast(RemoveReason, REMOVE_REASONS[flag])))
                    continue
                tokens = None
                if flag & F_TOKENS:
                    (nt,) = _U32.unpack_from(buf, pos)
                    pos += 4 + 4 * nt
                    if pos > end:
                        raise EventDecodeError("truncated event batch")
                    tokens = tuple(array("i", buf[pos - 4 * nt : pos]))
                ev = _new(BlockStored)  # frozen: its __init__ sets each field through object.__setattr__
                _s_keys(ev, keys), _s_tier(ev, tier), _s_parent(ev, parent)
                _s_bs(ev, block_size), _s_size(ev, size), _s_tokens(ev, tokens)
                out.append(ev)
            else:  # rare kinds: the reference reader from here
                r = _Reader(buf)
                r.pos = pos + 1
                out.append(_other(r, kind))
                pos = r.pos
    except (IndexError, struct.error):
        raise EventDecodeError("truncated event batch") from None
    if pos != end:
        raise _fail(buf, pos)
    return tuple(out)
