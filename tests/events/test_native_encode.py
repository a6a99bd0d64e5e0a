"""The compiled encoder (native/ctxcache_encode.c) against codec.encode_events_py, its reference:
the same bytes for random batches of the kinds it takes, and the reference's own result (bytes
or error) for everything it hands back (other kinds, token ids, fields the reference refuses)."""

from __future__ import annotations

import random

import pytest

from ctxcache import accel
from ctxcache.events import codec
from ctxcache.events.model import (
    REMOVE_REASONS,
    BlockRemoved,
    BlockStored,
    Heartbeat,
    TierCleared,
    WorkerStarted,
)

pytestmark = pytest.mark.skipif(accel.native is None, reason="ctxcache._native not built")


def _native(events: tuple) -> bytes | None:
    assert accel.native is not None
    return accel.native.encode_events(events, codec.VERSION, BlockStored, BlockRemoved, REMOVE_REASONS)  # type: ignore[no-any-return]


def _event(rng: random.Random) -> BlockStored | BlockRemoved:
    width = rng.choice((16, 16, 16, 8, 1))
    keys = tuple(rng.randbytes(width) for _ in range(rng.choice((0, 1, 2, 16, 300))))
    tier = rng.choice(("ram", "redis", "disk-ü", "t" * 255, ""))
    if rng.random() < 0.3:
        return BlockRemoved(keys, tier, rng.choice(REMOVE_REASONS))  # type: ignore[arg-type]
    parent = rng.choice((None, rng.randbytes(16), b"", rng.randbytes(255)))
    size = rng.choice((0, 1, 4096 * 16, 2**64 - 1))
    return BlockStored(keys, tier, parent, rng.choice((0, 16, 2**32 - 1)), size)


def test_the_compiled_encoder_writes_the_reference_bytes_on_random_batches():
    rng = random.Random(7)
    for _ in range(2000):
        events = tuple(_event(rng) for _ in range(rng.randint(0, 12)))
        got = _native(events)
        assert got is not None
        assert got == codec.encode_events_py(events)
        assert codec.decode_events(got) == events


@pytest.mark.parametrize(
    "event",
    [
        Heartbeat(),
        TierCleared("ram"),
        WorkerStarted(("ram",), (), 16),
        BlockStored((b"k" * 16,), "ram", None, 16, 10, (1, 2, 3)),  # token ids: the reference's
        BlockStored((b"k" * 16, b"k"), "ram"),  # mixed widths: ValueError
        BlockStored((b"k" * 16,), "t" * 256),  # tier over 255 bytes: ValueError
        BlockStored((b"k" * 16,), "ram", b"p" * 256),  # parent over 255 bytes: ValueError
        BlockStored((b"k" * 16,), "ram", None, 2**32),  # block size over u32: struct.error
        BlockStored((b"k" * 16,), "ram", None, 16, -1),  # negative size: struct.error
        BlockStored((b"k" * 256,), "ram"),  # key width over 255: ValueError
        BlockStored((bytearray(b"k" * 16),), "ram"),  # type: ignore[arg-type] # not bytes: the reference joins it
        BlockStored((b"k" * 16,), "\udcff"),  # not UTF-8 encodable: UnicodeEncodeError
        BlockRemoved((b"k" * 16,), "ram", "vanished"),  # type: ignore[arg-type] # unknown reason: ValueError
    ],
)
def test_what_it_does_not_take_goes_to_the_reference(event):
    batch = (BlockStored((b"a" * 16,), "ram", None, 16, 1), event)
    assert _native(batch) is None
    try:
        want: bytes | type[BaseException] = codec.encode_events_py(batch)
    except Exception as exc:  # noqa: BLE001 - the reference's error is the expected result
        want = type(exc)
    try:
        got: bytes | type[BaseException] = codec.encode_events(batch)
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    assert got == want
