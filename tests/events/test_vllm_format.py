"""vLLM's KV-event wire form: ctxcache reads vLLM's two encodings (fixtures made with vLLM's own
classes, tests/events/fixtures/make_vllm_fixtures.py) and writes what a decoder built from
vLLM's published schema reads; hostile bytes only ever raise EventDecodeError."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxcache.errors import EventDecodeError
from ctxcache.events import BlockRemoved, BlockStored, EventBatch, Heartbeat, TierCleared, WorkerStarted
from ctxcache.events.vllm_format import ALL_TIERS, Limits, decode_vllm, encode_vllm, hash_to_key, key_to_hash

FIX = Path(__file__).parent / "fixtures"
SPEC = json.loads((FIX / "vllm-events.json").read_text())


def _k(h: str | int) -> bytes:
    return int(h).to_bytes(8, "big")


def expected(key=_k) -> tuple[Any, ...]:
    h, tokens = SPEC["hashes"], tuple(SPEC["tokens"])
    return (
        BlockStored(
            keys=(key(h[0]), key(h[1])), tier="GPU", parent=key(SPEC["parent"]), block_size=4, token_ids=tokens
        ),
        BlockStored(keys=(key(h[2]),), tier="CPU#1", parent=None, block_size=4, token_ids=tokens[:4]),
        BlockRemoved(keys=tuple(key(r) for r in SPEC["removed"]), tier="GPU"),
        TierCleared(tier=ALL_TIERS),
    )


@pytest.mark.parametrize(("name", "form"), [("vllm-0.32-map", "map"), ("vllm-legacy-array", "array")])
def test_reads_both_encodings_vllm_has_used(name: str, form: str) -> None:
    d = decode_vllm((FIX / f"{name}.msgpack").read_bytes())
    assert d.forms == {form}
    assert d.ts == SPEC["ts"]
    assert d.events == expected()
    assert d.data_parallel_rank == (0 if form == "map" else None)


def test_reads_digest_hashes_and_folds_them_to_the_int_names() -> None:
    payload = (FIX / "vllm-0.32-map-bytes.msgpack").read_bytes()
    digests = SPEC["digests"]
    assert decode_vllm(payload).events == expected(lambda h: bytes.fromhex(digests[str(h)]))
    # Folded, a replica sending digests names every block as one sending ints does.
    assert decode_vllm(payload, fold64=True).events == expected()


def test_a_mixed_batch_decodes_event_by_event() -> None:
    arr = msgspec.msgpack.decode((FIX / "vllm-legacy-array.msgpack").read_bytes())
    mp = msgspec.msgpack.decode((FIX / "vllm-0.32-map.msgpack").read_bytes())
    mixed = msgspec.msgpack.encode([1.0, [arr[1][0], mp[1][2]], 3])
    d = decode_vllm(mixed)
    assert d.forms == {"array", "map"} and d.events == expected()[0:1] + expected()[2:3]
    assert d.data_parallel_rank == 3


def test_an_envelope_map_and_unknown_event_types_are_read() -> None:
    body = {"ts": 2.0, "events": [{"type": "BlockPinned", "block_hashes": [1]}, ["AllBlocksCleared"]]}
    d = decode_vllm(msgspec.msgpack.encode(body))
    assert d.events == (TierCleared(ALL_TIERS),) and d.unknown == 1
    assert decode_vllm(msgspec.msgpack.encode([3.0, []])).events == (Heartbeat(),)


# -- what ctxcache writes -------------------------------------------------------------------

KEYS = tuple(bytes([i]) * 8 + bytes([0xF0 + i]) * 8 for i in range(3))


def batch(tokens: tuple[int, ...] | None = (5, 6, 7, 8, 9, 10, 11, 12)) -> EventBatch:
    return EventBatch(
        "w",
        "e1",
        1,
        (
            WorkerStarted(("ram", "redis")),
            BlockStored(KEYS[:2], "ram", parent=KEYS[2], block_size=4, size=512, token_ids=tokens),
            BlockRemoved(KEYS[2:], "redis", "erased"),
            TierCleared("disk", "lost"),
            Heartbeat(),
        ),
        ts=12.5,
    )


# vLLM's published schema (vllm/distributed/kv_events.py, 0.32), written out as a consumer would.
class Stored(msgspec.Struct, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None


class Removed(msgspec.Struct, tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None


class Cleared(msgspec.Struct, tag="AllBlocksCleared"):
    pass


class Batch(msgspec.Struct, array_like=True):
    ts: float
    events: list[Stored | Removed | Cleared]
    data_parallel_rank: int | None = None


class AStored(Stored, array_like=True, tag="BlockStored"):
    pass


class ARemoved(Removed, array_like=True, tag="BlockRemoved"):
    pass


class ACleared(Cleared, array_like=True, tag="AllBlocksCleared"):
    pass


class ABatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[AStored | ARemoved | ACleared]
    data_parallel_rank: int | None = None


@pytest.mark.parametrize(("encoding", "schema"), [("map", Batch), ("array", ABatch)])
def test_a_decoder_from_vllms_schema_reads_what_ctxcache_writes(encoding: str, schema: Any) -> None:
    got = msgspec.msgpack.decode(encode_vllm(batch(), encoding=encoding), type=schema)  # type: ignore[arg-type]
    assert got.ts == 12.5 and got.data_parallel_rank == 0
    stored, removed, cleared_disk, cleared_all = got.events[1], got.events[2], got.events[3], got.events[0]
    ints = [int.from_bytes(k[-8:], "big") for k in KEYS]
    assert stored.block_hashes == ints[:2] and stored.parent_block_hash == ints[2]
    assert stored.medium == "ram" and stored.block_size == 4
    assert stored.token_ids == []  # not opted in: no prompt tokens on the wire
    assert removed.block_hashes == ints[2:] and removed.medium == "redis"
    assert type(cleared_all).__name__.endswith("Cleared") and type(cleared_disk).__name__.endswith("Cleared")
    assert len(got.events) == 4  # the heartbeat adds nothing


def test_token_ids_only_when_opted_in_and_full_keys_when_asked() -> None:
    raw = msgspec.msgpack.decode(encode_vllm(batch(), token_ids=True, hashes="bytes"))
    stored = raw[1][1]
    assert stored["token_ids"] == [5, 6, 7, 8, 9, 10, 11, 12]
    assert stored["block_hashes"] == list(KEYS[:2])
    assert raw[1][3] == {"type": "AllBlocksCleared", "medium": "disk"}


@pytest.mark.parametrize("encoding", ["map", "array"])
@pytest.mark.parametrize("hashes", ["int", "bytes"])
def test_round_trip(encoding: str, hashes: str) -> None:
    d = decode_vllm(encode_vllm(batch(), encoding=encoding, hashes=hashes, token_ids=True))  # type: ignore[arg-type]
    name = (lambda k: k[-8:]) if hashes == "int" else (lambda k: k)
    assert d.events[1] == BlockStored(
        tuple(map(name, KEYS[:2])), "ram", name(KEYS[2]), 4, 0, (5, 6, 7, 8, 9, 10, 11, 12)
    )
    assert d.events[2] == BlockRemoved(tuple(map(name, KEYS[2:])), "redis")
    assert d.events[3] == TierCleared("disk" if encoding == "map" else ALL_TIERS)
    assert d.events[0] == TierCleared(ALL_TIERS)  # WorkerStarted: forget everything


def test_hash_names() -> None:
    assert key_to_hash(KEYS[0]) == int.from_bytes(KEYS[0][8:], "big")
    assert hash_to_key(-1) == b"\xff" * 8  # older vLLM's signed 64-bit hashes
    assert hash_to_key(key_to_hash(KEYS[0])) == KEYS[0][8:]


# -- hostile input --------------------------------------------------------------------------


def enc(obj: Any) -> bytes:
    return msgspec.msgpack.encode(obj)


STORED = {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [], "block_size": 4}
HOSTILE = {
    "empty": b"",
    "garbage": b"\xc1\xff\x00garbage",
    "truncated": (FIX / "vllm-0.32-map.msgpack").read_bytes()[:-7],
    "deep nesting": b"\x91" * 200_000,
    "huge declared array": b"\xdd\xff\xff\xff\xff",
    "nil": enc(None),
    "int envelope": enc(7),
    "short envelope": enc([1.0]),
    "ts a string": enc(["now", []]),
    "events a map": enc([1.0, {"a": 1}]),
    "event a number": enc([1.0, [5]]),
    "empty event array": enc([1.0, [[]]]),
    "tag not a string": enc([1.0, [[7, [1]]]]),
    "map without tag": enc([1.0, [{"block_hashes": [1]}]]),
    "stored too short": enc([1.0, [["BlockStored", [1], None]]]),
    "stored lacks block_size": enc([1.0, [{k: v for k, v in STORED.items() if k != "block_size"}]]),
    "hashes not a list": enc([1.0, [{**STORED, "block_hashes": 5}]]),
    "hash a float": enc([1.0, [{**STORED, "block_hashes": [1.5]}]]),
    "hash a bool": enc([1.0, [{**STORED, "block_hashes": [True]}]]),
    "hash empty bytes": enc([1.0, [{**STORED, "block_hashes": [b""]}]]),
    "hash 100 bytes": enc([1.0, [{**STORED, "block_hashes": [b"x" * 100]}]]),
    "parent a list": enc([1.0, [{**STORED, "parent_block_hash": [1]}]]),
    "negative block size": enc([1.0, [{**STORED, "block_size": -4}]]),
    "token negative": enc([1.0, [{**STORED, "token_ids": [1, -2]}]]),
    "token too big": enc([1.0, [{**STORED, "token_ids": [1 << 40]}]]),
    "medium an int": enc([1.0, [{**STORED, "medium": 3}]]),
    "group negative": enc([1.0, [{**STORED, "group_idx": -1}]]),
    "removed without hashes": enc([1.0, [["BlockRemoved"]]]),
    "dp rank a string": enc([1.0, [], "zero"]),
    "ext type": b"\x92\xcb" + b"\x00" * 8 + b"\x91\xd4\x01\x00",
    "map with list key": b"\x92\x00\x91\x81\x91\x00\x00",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_payloads_raise_our_error_only(name: str) -> None:
    with pytest.raises(EventDecodeError, match="vLLM KV-event batch"):
        decode_vllm(HOSTILE[name])


def test_limits_hold() -> None:
    small = Limits(max_events=2, max_hashes=2, max_tokens=2)
    with pytest.raises(EventDecodeError, match="events in one batch"):
        decode_vllm(enc([1.0, [["AllBlocksCleared"]] * 3]), limits=small)
    with pytest.raises(EventDecodeError, match="block hashes"):
        decode_vllm(enc([1.0, [{**STORED, "block_hashes": [1, 2, 3]}]]), limits=small)
    with pytest.raises(EventDecodeError, match="token ids"):
        decode_vllm(enc([1.0, [{**STORED, "token_ids": [1, 2, 3]}]]), limits=small)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_escape(data: bytes) -> None:
    with contextlib.suppress(EventDecodeError):
        decode_vllm(data)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 30), st.binary(min_size=1, max_size=3))
def test_damaged_real_payloads_never_escape(at: int, junk: bytes) -> None:
    good = (FIX / "vllm-0.32-map.msgpack").read_bytes()
    bad = good[:at] + junk + good[at + len(junk) :]
    with contextlib.suppress(EventDecodeError):
        decode_vllm(bad)
