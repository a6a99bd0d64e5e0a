"""The codec's formats that outlive a process (a sealed blob, each payload kind's bytes), the fp16
range at its exact edge, and the payload kinds the hot tier must take as the codec does: bare torch
tensors and arrays of the other byte order."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import xxhash

from ctxcache.codec import Codec, read_header
from ctxcache.engine.sealing import TenantSealer
from ctxcache.errors import PayloadError
from ctxcache.payload import check_payload, flatten

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
