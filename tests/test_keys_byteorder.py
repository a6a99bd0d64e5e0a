"""Token arrays in a non-native byte order are validated by value, not by their raw bytes."""

from __future__ import annotations

import numpy as np
import pytest

from ctxcache.errors import InvalidTokensError
from ctxcache.keys import BlockHasher, Namespace, as_token_array

pytestmark = pytest.mark.usefixtures("key_walk")  # compiled and pure-Python (conftest.py)

SWAPPED = ">" if np.little_endian else "<"  # the byte order this machine does not use
DTYPES = [f"{SWAPPED}{c}{n}" for c in "iu" for n in (2, 4, 8)]


@pytest.mark.parametrize("dtype", DTYPES)
def test_valid_ids_in_swapped_byte_order_pass(dtype):
    # Byte-swapped, 128 reads as 2**31 (out of int32 range): a check on raw bytes refuses it.
    ids = [0, 1, 128, 255, 2**15 - 1] + ([2**24 + 1, 2**31 - 1] if dtype[-1] != "2" else [])
    arr = np.array(ids, dtype=dtype)
    for view in (arr, arr[::2]):
        out = as_token_array(view)
        assert out.dtype == np.dtype("<i4") and out.tolist() == view.tolist()


@pytest.mark.parametrize("dtype", [d for d in DTYPES if "i" in d])
def test_negative_ids_in_swapped_byte_order_are_refused(dtype):
    # -256 byte-swapped is a small positive number: a check on the raw bytes lets it through.
    with pytest.raises(InvalidTokensError, match="non-negative; found -256"):
        as_token_array(np.array([1, -256, 5], dtype=dtype))


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d.endswith("8")])
def test_too_large_ids_in_swapped_byte_order_are_refused(dtype):
    # 2**40 alone, byte-swapped, reads as 65536: it would silently wrap to token 0 in int32.
    with pytest.raises(InvalidTokensError, match="fit in int32"):
        as_token_array(np.array([2**40], dtype=dtype))


def test_swapped_byte_order_gives_the_same_keys():
    tokens = list(range(100, 164))
    h, ns = BlockHasher(16), Namespace()
    want = h.keys(tokens, ns)
    for c in "iu":
        assert h.keys(np.array(tokens, dtype=f"{SWAPPED}{c}4"), ns) == want
