"""Payload kinds: what the hot tier accepts (``check_payload``) is exactly what the codec encodes
(``flatten``), with the same error; and each kind round-trips with its dtypes and values."""

from __future__ import annotations

import numpy as np
import pytest

from ctxcache.codec import Codec
from ctxcache.errors import PayloadError
from ctxcache.payload import check_payload, flatten

KEY = bytes(range(16))
GOOD = [
    b"x",
    np.arange(6.0).reshape(2, 3),
    [np.zeros(2), np.ones(3, np.int8)],
    (np.zeros(2), np.ones(2)),
    [(np.zeros((1, 2)), np.ones((1, 2))), (np.zeros((1, 2)), np.ones((1, 2)))],
    {"k": np.zeros(2)},
]
BAD = [
    (object(), "a payload of type object"),
    (np.float32(1.0), "a payload of type float32"),
    ([1.5], "a payload item of type float"),
    ([(np.zeros(1), 1.5)], "a payload item of type float"),
    ({1: np.zeros(1)}, "names"),
    ([np.array(["a"])], "dtype <U1"),
]


@pytest.mark.parametrize("payload", GOOD, ids=range(len(GOOD)))
def test_the_hot_tier_accepts_every_payload_the_codec_encodes(payload):
    check_payload(payload)  # a KV-pair list must not be read as a list of tuples
    flatten(payload)


@pytest.mark.parametrize(("payload", "match"), BAD, ids=range(len(BAD)))
def test_the_hot_tier_refuses_with_the_codecs_own_error(payload, match):
    with pytest.raises(PayloadError, match=match) as from_codec:
        flatten(payload)
    with pytest.raises(PayloadError) as from_check:
        check_payload(payload)
    assert str(from_check.value) == str(from_codec.value)


def test_a_bare_array_round_trips_as_an_array():
    a = np.arange(6.0).reshape(2, 3)
    out = Codec().decode(Codec().encode(a, KEY)).payload
    assert isinstance(out, np.ndarray) and np.array_equal(out, a)


def test_contiguous_big_endian_arrays_are_stored_little_endian():
    # A contiguous array of another byte order must still be converted, not written as it is.
    payload = [np.arange(6, dtype=">f4"), np.arange(-3, 3, dtype=">i8").reshape(2, 3)]
    out = Codec().decode(Codec().encode(payload, KEY)).payload
    for a, b in zip(payload, out):
        assert np.array_equal(a, b) and b.dtype == a.dtype.newbyteorder("<")


@pytest.mark.parametrize("dtype", [np.int16, np.float16, np.bool_, np.uint64])
def test_empty_arrays_keep_their_dtype_and_shape(dtype):
    out = Codec().decode(Codec().encode([np.zeros((3, 0), dtype)], KEY)).payload[0]
    assert out.shape == (3, 0) and out.dtype == np.dtype(dtype)
