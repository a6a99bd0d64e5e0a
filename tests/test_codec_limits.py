"""The codec's limits at their exact boundaries, ``encoded_size`` exact for every layout, and the
smaller contracts mutation testing found unchecked (docs/testing.md): the default zstd level, the
header-length probe, the package an error names."""

from __future__ import annotations

import importlib
import struct
import warnings

import numpy as np
import pytest
import xxhash

from ctxcache.codec import _FIXED, MAGIC, MODES, Codec, header_length, read_header
from ctxcache.engine.sealing import TenantSealer
from ctxcache.errors import ConfigError, CorruptBlockError, PayloadError

from .test_codec import fixed_field, reseal

KEY = bytes(range(16))
IDS = "block keys and tenant ids are at most 255 bytes and depth fits in 32 bits"


@pytest.mark.parametrize("field", ["key", "parent", "tenant"])
def test_ids_of_255_bytes_fit_and_256_do_not(field):
    # The header stores each length in one byte: 256 must be refused as a PayloadError, not a
    # struct.error from deep inside encode.
    c, ok = Codec(), {"key": KEY}
    blob = c.encode([np.zeros(2)], **{**ok, field: b"x" * 255})
    assert getattr(c.decode(blob), field) == b"x" * 255
    with pytest.raises(PayloadError, match=IDS):
        c.encode([np.zeros(2)], **{**ok, field: b"x" * 256})


def test_depth_fits_in_32_bits():
    c = Codec()
    assert c.decode(c.encode([], KEY, depth=(1 << 32) - 1)).depth == (1 << 32) - 1
    assert c.decode(c.encode([], KEY, depth=0)).depth == 0
    for depth in (1 << 32, -1):
        with pytest.raises(PayloadError, match=IDS):
            c.encode([], KEY, depth=depth)


def test_array_dims_and_names_at_their_limits():
    c = Codec()
    a16, name = np.zeros((1,) * 16, np.float32), "n" * 4096
    out = c.decode(c.encode({name: a16}, KEY)).payload
    assert out[name].shape == (1,) * 16
    for bad in ({"a": np.zeros((1,) * 17)}, {name + "n": np.zeros(1)}):
        with pytest.raises(PayloadError, match="at most 16 dims and 4096-byte names"):
            c.encode(bad, KEY)


def sealed_codec(mode: str) -> Codec:
    c = Codec(mode)
    c.sealer = TenantSealer(bytes(range(32)))
    return c


PAYLOADS = [
    b"raw bytes",
    [np.arange(10, dtype=np.int64), np.ones((2, 3), np.float16)],
    {"k0": np.ones((2, 3, 4), np.float32), "values-0": np.full((2, 3, 4), 2.5, np.float32)},
    [(np.ones((1, 5, 8), np.float32), np.ones((1, 5, 8), np.float32))],
    [np.ones(7, np.float32), np.ones((4, 16, 2), np.float32)],  # int8 scales: 64 rows, 128 bytes
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sealed", [False, True])
def test_encoded_size_is_exact_without_compression(payload, mode, sealed):
    # encoded_size is what quotas and placement charge before a block is encoded: a wrong size
    # over- or under-fills a tier. Buffers are 64-byte aligned, which hides a wrong byte count
    # unless it crosses a boundary: every token length in one alignment period crosses one.
    c = sealed_codec(mode) if sealed else Codec(mode)
    for n_tokens in range(64):
        key, tokens, tenant = bytes(range(3 + n_tokens % 5)), b"t" * n_tokens, b"x" * (n_tokens % 3)
        blob = c.encode(payload, key, tokens, parent=key[::-1], tenant=tenant)
        assert c.encoded_size(payload, len(key), n_tokens, len(tenant)) == len(blob)


def test_encoded_size_defaults_are_16_byte_ids_no_tokens_no_tenant():
    c = Codec()
    for n in range(1, 65):  # a name of each length puts the header on each alignment phase
        payload = {"n" * n: np.ones(3, np.float32)}
        assert c.encoded_size(payload) == len(c.encode(payload, KEY, parent=KEY[::-1]))


def test_encode_defaults_are_a_root_block_with_no_tokens_and_no_tenant():
    b = Codec().decode(Codec().encode([np.ones(2)], KEY))
    assert (b.parent, b.depth, b.tokens, b.tenant) == (b"", 0, b"", b"")


def test_a_block_holds_fewer_than_65536_arrays():
    empty = np.zeros(0, np.uint8)
    Codec().encode([empty] * 65535, KEY)
    with pytest.raises(PayloadError, match="fewer than 65536 arrays, got 65536"):
        Codec().encode([empty] * 65536, KEY)


GOLDEN = {
    "raw": "94d98c2c1f5ab44b",
    "fp16": "54bb6e30c068f4f9",
    "k16v8": "9979195a0a6a9410",
    "int8": "3b622dd0a407dd1a",
    "bare": "e4a9476855218679",
}


def test_blob_bytes_are_stable_across_releases():
    # Blocks outlive the process (disk, Redis, other readers): the bytes of a version-2 blob are
    # part of the format. A change here needs a FORMAT_VERSION bump and a reader for the old one.
    kv = [(np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16), np.arange(32, dtype=np.float32).reshape(2, 16))]
    got = {
        m: xxhash.xxh3_64_hexdigest(Codec(m).encode(kv, KEY, b"tok!", parent=b"p" * 16, depth=3, tenant=b"acme"))
        for m in MODES
    }
    got["bare"] = xxhash.xxh3_64_hexdigest(Codec().encode(np.arange(4, dtype=np.int16), KEY))
    assert got == GOLDEN


def test_zstd_default_level_is_3():
    payload = [np.random.default_rng(0).integers(0, 16, 65536, dtype=np.uint8)]  # levels 3 and 4 differ
    default = Codec("raw", "zstd").encode(payload, KEY)
    assert default == Codec("raw", "zstd", level=3).encode(payload, KEY)
    assert default != Codec("raw", "zstd", level=4).encode(payload, KEY)


def test_header_length_needs_the_magic_and_the_fixed_header():
    blob = Codec().encode([np.zeros(4)], KEY)
    assert header_length(blob[: _FIXED.size]) == header_length(blob) > _FIXED.size
    for bad in (MAGIC + bytes(8), b"XXXX" + blob[4:], b""):
        with pytest.raises(CorruptBlockError, match="not a ctxcache block"):
            header_length(bad)


def test_a_missing_lz4_names_the_package_to_install(monkeypatch):
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module", lambda n: (_ for _ in ()).throw(ImportError(n)) or real(n))
    with pytest.raises(ConfigError, match=r"needs the 'lz4' package: pip install"):
        Codec("raw", "lz4")


def test_a_wrapped_decoder_error_names_its_cause():
    blob = bytearray(Codec().encode({"a": np.ones(2)}, KEY))
    name_at = bytes(blob).rindex(b"a", 0, header_length(blob))
    blob[name_at] = 0xFF  # not UTF-8: the name's decode raises inside the decoder
    with pytest.raises(CorruptBlockError, match="undecodable block: UnicodeDecodeError: 'utf-8' codec"):
        Codec().decode(reseal(bytes(blob)))


def test_a_decompressed_payload_of_another_length_is_corrupt():
    rng = np.random.default_rng(0)
    blob = bytearray(Codec("raw", "zstd").encode([rng.integers(0, 4, 4096, dtype=np.uint8)], KEY))
    raw_len = struct.unpack_from("<Q", blob, 28)[0]
    struct.pack_into("<Q", blob, 28, raw_len + 64)  # the header claims more than the frame holds
    with pytest.raises(CorruptBlockError, match="^decompressed payload length mismatch$"):
        Codec().decode(reseal(bytes(blob)))


def test_headers_a_reader_cannot_trust_are_refused_even_with_valid_checksums():
    tenant_block = Codec().encode([np.ones(2)], KEY, tenant=b"acme")
    with pytest.raises(CorruptBlockError, match="version-1 block carries no tenant"):
        read_header(fixed_field(tenant_block, 4, "<H", 1))  # the restart path reads headers alone
    plain = Codec().encode([np.ones(2)], KEY)
    for offset, value in ((6, 9), (7, 3), (8, 5)):  # mode, compression, payload kind
        with pytest.raises(CorruptBlockError, match="unknown mode, compression or payload kind"):
            read_header(fixed_field(plain, offset, "<B", value))


def test_a_decompression_bomb_is_refused_by_its_claimed_size():
    blob = Codec("raw", "zstd").encode([np.zeros(4096, np.uint8)], KEY)
    with pytest.raises(CorruptBlockError, match="block claims 4096 B uncompressed, over the 100 B limit"):
        Codec(max_bytes=100).decode(blob)


def test_int8_messages_and_zero_rows():
    # The refusal comes after numpy's float16 overflow warning (a follow-up: check before casting).
    with warnings.catch_warnings(), pytest.raises(PayloadError, match=r"too large for int8 with float16 scales"):
        warnings.simplefilter("ignore", RuntimeWarning)
        Codec("int8").encode([np.array([[1e9, 1.0]], np.float32)], KEY)
    with pytest.raises(ConfigError, match="known: none, lz4, zstd"):
        Codec("raw", "gzip")
    rows = np.array([[0.0, 0.0], [1.0, -2.0]], np.float32)  # an all-zero row has scale 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide-by-zero on the way: 0 / 0 is never computed
        out = Codec().decode(Codec("int8").encode([rows], KEY)).payload[0]
    assert np.array_equal(out[0], [0.0, 0.0]) and np.allclose(out[1], rows[1], atol=2 / 127)
