"""The block codec: round trips per mode, error bounds, integrity checks, and a decoder fuzz test."""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxcache.codec import _FIXED, _SUM_AT, COMPRESSIONS, MODES, Codec, header_length, read_header
from ctxcache.errors import ConfigError, CorruptBlockError, PayloadError

KEY, TOKENS = bytes(range(16)), np.arange(8, dtype="<i4").tobytes()


def kv_block(layers=3, heads=2, tokens=8, dim=16, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return [tuple(rng.standard_normal((heads, tokens, dim)).astype(dtype) for _ in "kv") for _ in range(layers)]


def max_err(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def test_raw_roundtrip_is_exact_zero_copy_and_carries_the_header():
    kv = kv_block()
    blob = Codec().encode(kv, KEY, TOKENS, parent=b"p" * 16, depth=7)
    assert Codec().encoded_size(kv, 16, len(TOKENS)) == len(blob)
    b = Codec().decode(blob, key=KEY)
    assert (b.key, b.parent, b.depth, b.tokens, b.nbytes) == (KEY, b"p" * 16, 7, TOKENS, len(blob))
    for (k, v), (k2, v2) in zip(kv, b.payload):
        assert np.array_equal(k, k2) and np.array_equal(v, v2) and k2.dtype == np.float32
        assert not k2.flags.writeable and k2.base is not None  # a view of the blob, not a copy
    assert isinstance(b.payload[0], tuple)


@pytest.mark.parametrize(
    "payload",
    [
        b"plain bytes",
        b"",
        [np.arange(10, dtype=np.int64), np.ones((2, 3), np.float16), np.array([True, False])],
        {"k0": np.zeros((1, 4, 2), np.float32), "v0": np.full((1, 4, 2), 2.5, np.float64)},
        (np.float32(3.5), np.zeros((0,), np.float32), np.zeros((3, 0), np.float16)),
        [np.arange(12, dtype=">f4").reshape(3, 4)[:, ::2]],  # big-endian, non-contiguous
        [],
    ],
)
@pytest.mark.parametrize("mode", MODES)
def test_every_payload_shape_roundtrips_in_every_mode(payload, mode):
    c = Codec(mode)
    blob = c.encode(payload, KEY, TOKENS)
    assert c.encoded_size(payload, len(KEY), len(TOKENS)) >= len(blob) - 16  # no parent given
    out = Codec().decode(blob).payload  # any Codec decodes any mode
    if isinstance(payload, bytes):
        assert out == payload and isinstance(out, bytes)
        return
    items = list(payload.items()) if isinstance(payload, dict) else list(enumerate(payload))
    got = list(out.items()) if isinstance(out, dict) else list(enumerate(out))
    assert [k for k, _ in items] == [k for k, _ in got]
    for (_, a), (_, b) in zip(items, got):
        a = np.asarray(a)
        assert b.shape == a.shape and b.dtype == a.dtype.newbyteorder("=")
        tol = 0 if mode == "raw" or a.dtype.kind != "f" else 0.02 * max(1.0, float(np.max(np.abs(a), initial=0)))
        assert max_err(a, b) <= tol if a.size else True


def test_error_bounds_per_mode():
    """The figures docs/storage.md quotes, on Gaussian KV: max abs and relative-to-max error."""
    kv = kv_block(layers=4, heads=2, tokens=64, dim=64, seed=3)
    errs = {}
    for mode in MODES:
        out = Codec().decode(Codec(mode).encode(kv, KEY)).payload
        abs_k = max(max_err(k, k2) for (k, _), (k2, _) in zip(kv, out))
        abs_v = max(max_err(v, v2) for (_, v), (_, v2) in zip(kv, out))
        errs[mode] = (abs_k, abs_v)
    amax = max(float(np.max(np.abs(a))) for pair in kv for a in pair)
    assert errs["raw"] == (0.0, 0.0)
    assert max(errs["fp16"]) <= amax * 2**-11  # float16 rounding: half an ulp, relative 4.9e-4
    assert errs["k16v8"][0] == errs["fp16"][0]  # keys are float16 in k16v8
    # int8 with a per-row float16 scale s = amax_row / 127 (rounded up): |error| <= s / 2.
    assert errs["k16v8"][1] <= amax / 254 * 1.001 and errs["int8"][0] <= amax / 254 * 1.001
    assert errs["k16v8"][1] > errs["fp16"][1]


def test_int8_error_is_bounded_per_row():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 32, 16)).astype(np.float32) * rng.uniform(0.001, 100, size=(4, 32, 1))
    y = Codec().decode(Codec("int8").encode([x], KEY)).payload[0]
    row_max = np.max(np.abs(x), axis=-1, keepdims=True)
    assert np.all(np.abs(x - y) <= row_max / 254 * 1.001 + 1e-12)


def test_k16v8_is_three_eighths_of_fp32():
    kv = kv_block(layers=18, heads=1, tokens=256, dim=256)
    raw, small = Codec().encode(kv, KEY), Codec("k16v8").encode(kv, KEY)
    assert 0.375 <= len(small) / len(raw) < 0.377  # + one float16 scale per token row


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compression_roundtrips_and_falls_back_when_it_does_not_help(compression):
    zeros = [np.zeros((4, 256), np.float32)]
    c = Codec("raw", compression)
    blob = c.encode(zeros, KEY)
    assert len(blob) < 1024 and np.array_equal(Codec().decode(blob).payload[0], zeros[0])
    noise = [np.random.default_rng(0).integers(0, 255, 4096, dtype=np.uint8)]
    assert len(c.encode(noise, KEY)) == len(Codec().encode(noise, KEY))  # stored uncompressed


def test_missing_compression_package_is_a_clear_config_error(monkeypatch):
    import importlib

    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda n: (_ for _ in ()).throw(ImportError(n)) or real(n))
    with pytest.raises(ConfigError, match="needs the 'zstandard' package"):
        Codec("raw", "zstd")


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (object(), "cannot encode a payload of type object"),
        ([1.5], "payload item of type float"),
        ([np.array(["a"])], "dtype <U1"),
        ({1: np.zeros(2)}, "names"),
    ],
)
def test_unencodable_payloads_raise_payload_error(payload, match):
    with pytest.raises(PayloadError, match=match):
        Codec().encode(payload, KEY)


def test_lossy_modes_refuse_values_they_cannot_represent():
    with pytest.raises(PayloadError, match="float16 range"):
        Codec("fp16").encode([np.array([1e6], np.float32)], KEY)
    with pytest.raises(PayloadError, match="non-finite"):
        Codec("int8").encode([np.array([1.0, np.nan], np.float32)], KEY)
    with pytest.raises(ConfigError, match="unknown codec mode"):
        Codec("fp8")


def test_every_single_byte_flip_is_detected():
    blob = Codec("k16v8").encode(kv_block(layers=1, tokens=2, dim=4), KEY, TOKENS)
    for i in range(len(blob)):
        bad = bytearray(blob)
        bad[i] ^= 0x40
        with pytest.raises(CorruptBlockError):
            Codec().decode(bytes(bad))


def test_truncation_wrong_key_and_header_only_reads():
    blob = Codec().encode(kv_block(layers=1), KEY, TOKENS)
    for n in (0, 10, 59, 60, header_length(blob), len(blob) - 1):
        with pytest.raises(CorruptBlockError):
            Codec().decode(blob[:n])
    with pytest.raises(CorruptBlockError, match="key"):
        Codec().decode(blob, key=b"x" * 16)
    h = read_header(blob[: header_length(blob)])
    assert (h.key, h.tokens, h.total_len) == (KEY, TOKENS, len(blob))


# --- fuzzing ----------------------------------------------------------------------------------------
SEEDS = [
    Codec(m, c).encode(p, KEY[: 1 + i % 16], TOKENS[: 4 * (i % 3)])
    for i, (m, c, p) in enumerate(
        [
            ("raw", "none", [np.arange(6, dtype=np.float32).reshape(2, 3)]),
            ("k16v8", "none", [(np.ones((1, 2, 4), np.float32), np.ones((1, 2, 4), np.float32))]),
            ("int8", "lz4", {"a": np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)}),
            ("fp16", "zstd", [np.zeros((16,), np.float64), np.arange(3, dtype=np.int16)]),
            ("raw", "none", b"some raw bytes"),
        ]
    )
]


def reseal(blob: bytes) -> bytes:
    """Recompute both checksums, so a mutation reaches the structural checks behind them."""
    b = bytearray(blob)
    if len(b) < _FIXED.size:
        return blob
    hlen = struct.unpack_from("<I", b, 24)[0]
    if not _FIXED.size <= hlen <= len(b):
        return blob
    struct.pack_into("<Q", b, 44, xxhash.xxh3_64_intdigest(bytes(b[hlen:])))
    struct.pack_into("<Q", b, _SUM_AT, 0)
    struct.pack_into("<Q", b, _SUM_AT, xxhash.xxh3_64_intdigest(bytes(b[:hlen])))
    return bytes(b)


def fixed_field(blob: bytes, offset: int, fmt: str, value: int) -> bytes:
    """The blob with one fixed-header field changed and both checksums recomputed."""
    b = bytearray(blob)
    struct.pack_into(fmt, b, offset, value)
    return reseal(bytes(b))


def mutate(blob: bytes, seed: int) -> bytes:
    """1-4 random flips, overwrites, cuts or insertions, then maybe resealed. A seeded PRNG instead of
    one hypothesis draw per choice keeps each case well under a millisecond."""
    rng = random.Random(seed)
    b = bytearray(blob)
    for _ in range(rng.randint(1, 4)):
        op, i = rng.randrange(4), rng.randrange(max(1, len(b)))
        if op == 0 and b:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[i] = rng.randrange(256)
        elif op == 2:
            del b[i:]
        else:
            b[i:i] = rng.randbytes(rng.randint(1, 8))
    return reseal(bytes(b)) if rng.random() < 0.5 else bytes(b)


@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(st.binary(max_size=200), st.builds(mutate, st.sampled_from(SEEDS), st.integers(0, 2**32))))
def test_decoder_fuzz_only_ever_raises_corrupt_block_error(blob):
    try:
        block = Codec().decode(blob)
    except CorruptBlockError:
        return
    assert isinstance(block.key, bytes)  # a mutation that kept the block valid (e.g. a no-op)


def test_fuzz_seeds_are_valid():
    for blob in SEEDS:
        Codec().decode(blob)
        assert Codec().decode(reseal(blob)).nbytes == len(blob)


def test_modes_and_compressions_are_documented():
    assert MODES == ("raw", "fp16", "k16v8", "int8") and COMPRESSIONS == ("none", "lz4", "zstd")


def test_torch_tensors_encode_including_bfloat16():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    k, v = torch.randn(1, 8, 16, dtype=torch.bfloat16), torch.randn(1, 8, 16, dtype=torch.float16)
    for mode in MODES:
        ((k2, v2),) = Codec().decode(Codec(mode).encode([(k, v)], KEY)).payload
        assert k2.dtype == np.float32 and v2.dtype == np.float16  # numpy has no bfloat16: exact float32
        tol = 0 if mode != "int8" else float(k.float().abs().max()) / 254 * 1.001
        assert float((torch.from_numpy(k2) - k.float()).abs().max()) <= tol
