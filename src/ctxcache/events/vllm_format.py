"""ctxcache's KV events in vLLM's KV-event wire form (docs/events-vllm.md), both ways.

vLLM publishes a ``KVEventBatch`` (ts, events, data_parallel_rank) per scheduler step, msgpack
encoded, each event a tagged ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``. The
inner events have had two encodings: positional arrays whose first element is the tag (vLLM
before PR #42892, mid 2026) and maps whose ``"type"`` key is the tag (after it). A decoder that
reads one form only receives nothing from the other, so :func:`decode_vllm` takes either, per
event, and an envelope that is an array or a map.

Written from vLLM's published schema, not its code; nothing here imports vLLM.

Mapping (ctxcache -> vLLM):
- a key becomes a block hash: by default the unsigned 64-bit integer of its last 8 bytes read
  big-endian (vLLM's default, ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``: its own bytes->int fold
  applied to our key gives the same number); ``hashes="bytes"`` sends the whole 16-byte key.
- ``tier`` is ``medium``. vLLM's ``group_idx`` (hybrid models' KV groups) is folded into the tier
  name when decoding (``"GPU#1"``) so a removal in one group never clears another's entry.
- ``TierCleared`` and ``WorkerStarted`` become ``AllBlocksCleared`` (the map form names the tier
  in an extra ``medium`` key that vLLM's own decoder ignores): a vLLM consumer then forgets more
  than it must, never less. ``Heartbeat`` is an empty batch.
- token ids only when the caller opts in (they expose prompt tokens to every subscriber);
  otherwise ``token_ids`` is the empty list vLLM's schema requires.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from ..errors import EventDecodeError
from .model import BlockRemoved, BlockStored, Event, EventBatch, Heartbeat, TierCleared, WorkerStarted

Encoding = Literal["map", "array"]
HashForm = Literal["int", "bytes"]
ENCODINGS: tuple[str, ...] = ("map", "array")
HASH_FORMS: tuple[str, ...] = ("int", "bytes")

# TierCleared(tier=ALL_TIERS): vLLM's AllBlocksCleared without a medium, i.e. every tier the
# publisher has. The ZMQ subscriber expands it into one TierCleared per tier it has seen.
ALL_TIERS = "*"
# What vLLM meant before events carried a medium: its GPU prefix cache was the only one.
DEFAULT_MEDIUM = "GPU"

_U64 = (1 << 64) - 1
_MAX_HASH_BYTES = 64  # vLLM's digests are 32 bytes, ctxcache's keys 16
_MAX_TOKEN = (1 << 32) - 1

# Field order of vLLM's structs after the tag, as its array form lays them out. Trailing fields
# with defaults are omitted by vLLM's encoder (omit_defaults), so shorter arrays are normal.
_STORED_FIELDS = (
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
    "lora_name",
    "extra_keys",
    "group_idx",
    "kv_cache_spec_kind",
    "kv_cache_spec_sliding_window",
    "locality",
    "ownership",
    "session_id",
)
_REMOVED_FIELDS = ("block_hashes", "medium", "group_idx", "locality", "ownership")
_STORED_REQUIRED = 4  # block_hashes, parent_block_hash, token_ids, block_size
_ENVELOPE_FIELDS = ("ts", "events", "data_parallel_rank")


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds a decoder enforces on untrusted payloads (the socket bounds the frame size)."""

    max_events: int = 100_000
    max_hashes: int = 1 << 20
    max_tokens: int = 1 << 24


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One vLLM ``KVEventBatch`` in ctxcache's model. ``unknown``: events of a type this version
    does not know, skipped (a newer vLLM may add some); ``forms``: the inner encodings seen."""

    ts: float
    events: tuple[Event, ...]
    data_parallel_rank: int | None = None
    unknown: int = 0
    forms: frozenset[str] = frozenset()


# -- encoding ---------------------------------------------------------------------------------


def key_to_hash(key: bytes, hashes: HashForm = "int") -> int | bytes:
    if hashes == "bytes":
        return key
    return int.from_bytes(key[-8:], "big")


def _stored(ev: BlockStored, hashes: HashForm, token_ids: bool) -> dict[str, Any]:
    parent = None if ev.parent is None else key_to_hash(ev.parent, hashes)
    tokens = list(ev.token_ids) if token_ids and ev.token_ids is not None else []
    return {
        "type": "BlockStored",
        "block_hashes": [key_to_hash(k, hashes) for k in ev.keys],
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": ev.block_size,
        "lora_id": None,
        "medium": ev.tier,
        "lora_name": None,
    }


def _vllm_events(events: Iterable[Event], hashes: HashForm, token_ids: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for ev in events:
        if isinstance(ev, BlockStored):
            out.append(_stored(ev, hashes, token_ids))
        elif isinstance(ev, BlockRemoved):
            out.append(
                {"type": "BlockRemoved", "block_hashes": [key_to_hash(k, hashes) for k in ev.keys], "medium": ev.tier}
            )
        elif isinstance(ev, TierCleared):
            out.append({"type": "AllBlocksCleared", "medium": ev.tier})
        elif isinstance(ev, WorkerStarted):
            out.append({"type": "AllBlocksCleared"})
        # Heartbeat: nothing; the batch still goes out (possibly empty) and keeps its sequence.
    return out


def _as_array(event: dict[str, Any]) -> list[Any]:
    # The legacy positional form carries vLLM's own fields only: an extension at a position
    # vLLM later assigns would be misread by every positional decoder.
    tag = event["type"]
    if tag == "BlockStored":
        return [tag, *(event[f] for f in _STORED_FIELDS[:7])]
    if tag == "BlockRemoved":
        return [tag, event["block_hashes"], event["medium"]]
    return [tag]


def encode_vllm(
    batch: EventBatch,
    *,
    encoding: Encoding = "map",
    hashes: HashForm = "int",
    token_ids: bool = False,
    data_parallel_rank: int | None = 0,
) -> bytes:
    """``batch`` as the msgpack payload of one vLLM ZMQ message. ``encoding``: ``"map"`` (vLLM
    after PR #42892, what vllm 0.32 emits) or ``"array"`` (older consumers). The envelope is
    positional in both, as vLLM's is."""
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; known: {', '.join(ENCODINGS)}")
    if hashes not in HASH_FORMS:
        raise ValueError(f"unknown hash form {hashes!r}; known: {', '.join(HASH_FORMS)}")
    events: list[Any] = _vllm_events(batch.events, hashes, token_ids)
    if encoding == "array":
        events = [_as_array(e) for e in events]
    envelope: list[Any] = [batch.ts, events]
    if data_parallel_rank is not None:
        envelope.append(data_parallel_rank)
    return msgspec.msgpack.encode(envelope)


# -- decoding ---------------------------------------------------------------------------------


def _fail(msg: str) -> EventDecodeError:
    return EventDecodeError(f"vLLM KV-event batch: {msg}")


def hash_to_key(h: object, fold64: bool = False) -> bytes:
    """A vLLM block hash as a ctxcache key. An int (possibly a signed 64-bit one from older
    vLLM) becomes 8 big-endian bytes; bytes stay as they are, or, with ``fold64``, become
    their last 8 bytes, so a replica sending digests and one sending ints name a block alike."""
    if type(h) is int:
        if not -(1 << 63) <= h <= _U64:
            raise _fail(f"block hash {h} is outside 64 bits")
        return (h & _U64).to_bytes(8, "big")
    if isinstance(h, bytes):
        if not 0 < len(h) <= _MAX_HASH_BYTES:
            raise _fail(f"block hash of {len(h)} bytes")
        return h[-8:].rjust(8, b"\0") if fold64 else h
    raise _fail(f"block hash must be an int or bytes, not {type(h).__name__}")


def _hashes(v: object, limits: Limits, fold64: bool) -> tuple[bytes, ...]:
    if not isinstance(v, list):
        raise _fail(f"block_hashes must be an array, not {type(v).__name__}")
    if len(v) > limits.max_hashes:
        raise _fail(f"{len(v)} block hashes in one event (limit {limits.max_hashes})")
    return tuple(hash_to_key(h, fold64) for h in v)


def _int(v: object, name: str, lo: int = 0, hi: int = _U64) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise _fail(f"{name} must be an integer in [{lo}, {hi}], got {v!r:.80}")
    return v


def _opt_str(v: object, name: str) -> str | None:
    if v is None or isinstance(v, str):
        return v
    raise _fail(f"{name} must be a string or nil, not {type(v).__name__}")


def _tokens(v: object, limits: Limits) -> tuple[int, ...] | None:
    if not isinstance(v, list):
        raise _fail(f"token_ids must be an array, not {type(v).__name__}")
    if len(v) > limits.max_tokens:
        raise _fail(f"{len(v)} token ids in one event (limit {limits.max_tokens})")
    if not all(type(t) is int and 0 <= t <= _MAX_TOKEN for t in v):
        raise _fail("token_ids must be integers in [0, 2**32)")
    return tuple(v) or None


def _tier(fields: Mapping[str, Any]) -> str:
    medium = _opt_str(fields.get("medium"), "medium") or DEFAULT_MEDIUM
    group = fields.get("group_idx")
    if group is None:
        return medium
    return medium if _int(group, "group_idx", 0, 1 << 31) == 0 else f"{medium}#{group}"


def _fields(
    raw: Sequence[Any] | Mapping[Any, Any], names: tuple[str, ...], required: int, tag: str
) -> Mapping[str, Any]:
    if isinstance(raw, Mapping):
        missing = [n for n in names[:required] if n not in raw]
        if missing:
            raise _fail(f"{tag} lacks {', '.join(missing)}")
        return raw
    if len(raw) - 1 < required:
        raise _fail(f"{tag} has {len(raw) - 1} fields, needs at least {required}")
    return dict(zip(names, raw[1:]))


def _event(raw: object, limits: Limits, fold64: bool) -> tuple[Event | None, str]:
    """One vLLM event (array or map form) and the form it came in; None for an unknown tag."""
    if isinstance(raw, list) and raw:
        form, tag = "array", raw[0]
    elif isinstance(raw, dict):
        form, tag = "map", raw.get("type")
    else:
        raise _fail(f"an event must be a tagged array or map, got {type(raw).__name__}")
    if not isinstance(tag, str):
        raise _fail(f"event tag must be a string, got {type(tag).__name__}")
    if tag == "BlockStored":
        f = _fields(raw, _STORED_FIELDS, _STORED_REQUIRED, tag)
        parent = f["parent_block_hash"]
        return BlockStored(
            keys=_hashes(f["block_hashes"], limits, fold64),
            tier=_tier(f),
            parent=None if parent is None else hash_to_key(parent, fold64),
            block_size=_int(f["block_size"], "block_size", 0, 1 << 31),
            token_ids=_tokens(f["token_ids"], limits),
        ), form
    if tag == "BlockRemoved":
        f = _fields(raw, _REMOVED_FIELDS, 1, tag)
        return BlockRemoved(keys=_hashes(f["block_hashes"], limits, fold64), tier=_tier(f)), form
    if tag == "AllBlocksCleared":
        medium = _opt_str(raw.get("medium"), "medium") if isinstance(raw, dict) else None
        return TierCleared(tier=medium or ALL_TIERS), form
    return None, form


def _envelope(obj: object) -> tuple[object, object, object]:
    if isinstance(obj, list):
        if not 2 <= len(obj) <= 16:
            raise _fail(f"envelope array of {len(obj)} fields, expected [ts, events, data_parallel_rank]")
        return obj[0], obj[1], obj[2] if len(obj) > 2 else None
    if isinstance(obj, dict):
        if "ts" not in obj or "events" not in obj:
            raise _fail("envelope map lacks ts or events")
        return obj["ts"], obj["events"], obj.get("data_parallel_rank")
    raise _fail(f"envelope must be an array or a map, not {type(obj).__name__}")


def decode_vllm(payload: bytes, *, limits: Limits = DEFAULT_LIMITS, fold64: bool = False) -> DecodedBatch:
    """Decode one vLLM (or ctxcache) KV-event payload. Raises :class:`EventDecodeError`, and
    nothing else, for bytes that are not a batch in either encoding."""
    try:
        obj = msgspec.msgpack.decode(payload)
    except (msgspec.DecodeError, RecursionError, ValueError, TypeError) as exc:
        raise _fail(f"not msgpack ({exc})") from None
    ts, events, rank = _envelope(obj)
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        raise _fail(f"ts must be a number, not {type(ts).__name__}")
    if not isinstance(events, list):
        raise _fail(f"events must be an array, not {type(events).__name__}")
    if len(events) > limits.max_events:
        raise _fail(f"{len(events)} events in one batch (limit {limits.max_events})")
    out: list[Event] = []
    forms: set[str] = set()
    unknown = 0
    for raw in events:
        ev, form = _event(raw, limits, fold64)
        forms.add(form)
        if ev is None:
            unknown += 1
        else:
            out.append(ev)
    if not events:
        out.append(Heartbeat())
    dp = None if rank is None else _int(rank, "data_parallel_rank", 0, 1 << 31)
    return DecodedBatch(ts=float(ts), events=tuple(out), data_parallel_rank=dp, unknown=unknown, forms=frozenset(forms))
