"""The codec's formats that outlive a process (a sealed blob, each payload kind's bytes), the fp16
range at its exact edge, and the payload kinds the hot tier must take as the codec does: bare torch
tensors and arrays of the other byte order."""

from __future__ import annotations

import base64
import hashlib
import struct

import numpy as np
import pytest
import xxhash

from ctxcache.codec import FIXED_HEADER_SIZE, Codec, read_header
from ctxcache.engine.sealing import TenantSealer
from ctxcache.errors import ConfigError, CorruptBlockError, PayloadError
from ctxcache.payload import check_payload, flatten

from .test_codec import fixed_field, reseal

KEY = bytes(range(16))

# Sealed by format version 2 (AES-GCM, master key "ab" * 32, tenant "acme", key "k" * 16,
# parent "p" * 16, depth 3, tokens "tok!", payload b"sealed kv").
SEALED_V2 = base64.b64decode(
    "Q1RYQgIAAACAEBAEAwAAAAEAAAAEAAAAwAAAAEAAAAAAAAAAXAAAAAAAAACXYQl7c5KNdE6QFAAvl5/ya2tra2tra2tra2tra2tr"
    "a3BwcHBwcHBwcHBwcHBwcHBhY21ldG9rIQYGAQAAAAAAAAAAAAAAAAAJAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAJAAAAAAAAAAAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAClS1eiCi3jt1YlJiBrKo636tk4F7unxYV+MEampTBDvq"
    "7tmfdFkKPtJ8BprZXiWqVnUmr+1aG5fdKqplc6q48NC5bhu5So+lDwPGDe2lpAXkovI6qsRQacDHq3k="
)


def test_a_block_sealed_by_this_format_version_still_opens():
    # Sealed blocks stay on disk and in Redis across upgrades. The associated data (the block's
    # identity) is rebuilt at every open, so any change to how it is built makes every sealed
    # block a miss: that needs a format version bump, like any change to the blob bytes.
    c = Codec()
    c.sealer = TenantSealer(bytes.fromhex("ab" * 32))
    h = read_header(SEALED_V2)
    assert h.sealed and h.tenant == b"acme" and h.key == b"k" * 16
    block = c.decode(SEALED_V2, b"k" * 16)
    assert block.payload == b"sealed kv" and block.depth == 3 and block.tokens == b"tok!"


GOLDEN_KINDS = {"bytes": "1c1f5153cfd5beef", "list": "faf0d4da6b486c91", "dict": "d4b2ef9595e4d8eb"}


def test_blob_bytes_of_every_payload_kind_are_stable():
    # test_codec_limits pins (K, V) pairs and a bare array; these are the other kinds.
    arrays = [np.arange(3, dtype=np.float32), np.arange(2, dtype=np.int8)]
    kinds = {"bytes": b"kv bytes", "list": arrays, "dict": dict(zip("kv", arrays))}
    got = {name: xxhash.xxh3_64_hexdigest(Codec().encode(p, KEY)) for name, p in kinds.items()}
    assert got == GOLDEN_KINDS
    assert Codec().encode(tuple(arrays), KEY) == Codec().encode(arrays, KEY)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fp16_takes_its_largest_finite_value_and_refuses_anything_above(dtype):
    edge = np.array([65504.0, -65504.0, 1.0], dtype)
    out = Codec("fp16").decode(Codec("fp16").encode([edge], KEY)).payload[0]
    assert out.tolist() == edge.tolist()
    above = np.nextafter(dtype(65504.0), dtype(np.inf))  # float16 would round it to 65504 silently
    for bad in (above, -above):
        with pytest.raises(PayloadError, match=r"float16 range \(\|x\| > 65504\)"):
            Codec("fp16").encode([np.array([1.0, bad], dtype)], KEY)


def test_a_bare_torch_tensor_is_a_payload_for_the_hot_tier_and_the_codec():
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    check_payload(t)  # a RAM tier takes it ...
    out = Codec().decode(Codec().encode(t, KEY)).payload  # ... and can spill it later
    assert isinstance(out, np.ndarray) and out.tolist() == t.tolist()
    with pytest.raises(PayloadError, match="dtype torch.complex64"):
        check_payload(torch.zeros(2, dtype=torch.complex64))


@pytest.mark.parametrize("dtype", [">f4", ">i8", ">u2"])
def test_the_hot_tier_takes_arrays_of_the_other_byte_order(dtype):
    a = np.arange(6, dtype=dtype).reshape(2, 3)
    for payload in (a, [a], {"k": a}, [(a, a)]):
        check_payload(payload)
        flatten(payload)
    with pytest.raises(PayloadError, match="dtype >c8"):
        check_payload([np.zeros(2, ">c8")])


def test_a_stored_dtype_the_mode_cannot_produce_is_corrupt():
    # fp16 mode stores a float32 array as float16 (stored code 1, original 2). An edited header with
    # valid checksums (they are not keyed) must not turn that into another array.
    blob = Codec("fp16").encode([np.arange(4, dtype=np.float32)], KEY)
    entry = FIXED_HEADER_SIZE + len(KEY)  # the first array entry, after the key (no parent, tenant, tokens)
    assert blob[entry : entry + 2] == bytes([1, 2])
    for offset, value in ((entry + 1, 9), (entry + 1, 6), (6, 0)):  # original int32, uint8; mode raw
        edited = bytearray(blob)
        edited[offset] = value
        with pytest.raises(CorruptBlockError, match="stored and original dtypes do not match the mode"):
            Codec().decode(reseal(bytes(edited)))


def float16_kv() -> np.ndarray:
    """256 rows of float16 values with row-varying amplitude (so, many distinct int8 scales), from a
    platform-independent byte stream rather than a numpy RNG whose streams may change."""
    raw = b"".join(hashlib.blake2b(b"%d" % i).digest() for i in range(2048))
    u = (np.frombuffer(raw, "<u2").astype(np.float64) - 32768) / 32768
    return (u.reshape(256, 256) * (1 + np.arange(256)[:, None] / 37)).astype(np.float16)


GOLDEN_F16_KV = {"k16v8": "e8460ac4361c73eb", "int8": "8ff04ba65fd372c0"}


def test_int8_blobs_of_float16_kv_are_stable():
    # KV caches are usually float16. Quantization computes in float32; a change in that arithmetic
    # rounds some elements to the other neighbour, which moves the measured error figures of
    # docs/storage.md: such a change must be deliberate and update this table.
    x = float16_kv()
    got = {m: xxhash.xxh3_64_hexdigest(Codec(m).encode([(x, x[::-1].copy())], KEY)) for m in GOLDEN_F16_KV}
    assert got == GOLDEN_F16_KV


def test_crafted_array_tables_are_corrupt_even_with_valid_checksums():
    entry = FIXED_HEADER_SIZE + len(KEY)
    blob = Codec("int8").encode([np.ones((2, 64), np.float32)], KEY)  # int8 at 0, scales at 128
    assert struct.unpack_from("<QQQQ", blob, entry + 8) == (0, 128, 128, 4)
    edited = bytearray(blob)
    struct.pack_into("<Q", edited, entry + 24, 129)  # scales moved off their 64-byte alignment
    with pytest.raises(CorruptBlockError, match="scale buffer out of bounds or of the wrong length"):
        Codec().decode(reseal(bytes(edited)))
    # A bytes payload (kind 0) is exactly one uint8 vector: two of them are a list, not bytes.
    for arrays in ([np.zeros(2, np.uint8), np.zeros(3, np.uint8)], [np.zeros(4, np.float32)]):
        edited = bytearray(Codec().encode(arrays, KEY))
        edited[8] = 0  # the payload kind byte
        with pytest.raises(CorruptBlockError, match="a bytes block holds exactly one uint8 vector"):
            Codec().decode(reseal(bytes(edited)))
    edited = bytearray(Codec().encode([np.zeros(1)] * 3, KEY))
    edited[8] = 3  # (K, V) pairs: three arrays are not pairs, and the error says what does not fit
    with pytest.raises(CorruptBlockError, match="payload kind 3 does not fit its 3 arrays"):
        Codec().decode(reseal(bytes(edited)))


def test_crafted_lengths_in_the_header_and_the_array_table_are_refused():
    # A header length too short for its own fields, checksummed over what it claims: the restart
    # scan reads headers alone (read_header), so it must refuse it there, not read past it.
    blob = Codec().encode([np.ones(2)], KEY, tenant=b"t" * 255)
    with pytest.raises(CorruptBlockError, match="bad header length"):
        read_header(fixed_field(blob, 24, "<I", 64))
    entry = FIXED_HEADER_SIZE + len(KEY)
    plain = Codec().encode([np.zeros(2)], KEY)  # zero bytes after the table: a valid utf-8 name
    with pytest.raises(CorruptBlockError, match="bad array entry"):
        Codec().decode(fixed_field(plain, entry + 2, "<B", 17))  # 17 dims: more than the encoder writes
    with pytest.raises(CorruptBlockError, match="array table overruns the header"):
        Codec().decode(fixed_field(plain, entry + 4, "<H", 64))  # a name running past the header


def test_each_checksum_names_the_part_it_caught():
    # A flipped byte of the key (which no structural check reads) is caught by the header checksum,
    # one of the payload by the payload checksum; the message tells an operator which.
    blob = Codec().encode([np.ones(2)], KEY)
    for at, part in ((FIXED_HEADER_SIZE + 3, "header"), (len(blob) - 1, "payload")):
        b = bytearray(blob)
        b[at] ^= 1
        with pytest.raises(CorruptBlockError, match=f"^{part} checksum mismatch$"):
            Codec().decode(bytes(b))


def test_an_unknown_mode_error_lists_the_modes():
    # A config typo gets the list to pick from (the compression error does the same).
    with pytest.raises(ConfigError, match=r"unknown codec mode 'fp8'; known: raw, fp16, k16v8, int8$"):
        Codec("fp8")
