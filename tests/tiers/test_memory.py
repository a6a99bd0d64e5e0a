from __future__ import annotations

import numpy as np
import pytest

from ctxcache.errors import ConfigError, PayloadError
from ctxcache.tiers import MemoryTier, payload_nbytes


def test_sizes_are_measured():
    a = np.zeros((2, 3, 4), dtype=np.float32)
    assert payload_nbytes(a) == 96
    assert payload_nbytes(a[0]) == 48  # a view counts its own extent
    assert payload_nbytes(b"abc") == 3 and payload_nbytes(bytearray(5)) == 5
    assert payload_nbytes(memoryview(bytes(7))) == 7
    assert payload_nbytes({"k": a, "v": [a, b"xy"]}) == 96 * 2 + 2
    assert payload_nbytes((a, None)) == 96


def test_torch_tensors_are_measured():
    torch = pytest.importorskip("torch")
    t = torch.zeros(4, 8, dtype=torch.float16)
    assert payload_nbytes(t) == 64
    assert payload_nbytes([t, t]) == 128


def test_unknown_payload_types_are_refused():
    with pytest.raises(PayloadError, match="cannot size a payload of type object"):
        payload_nbytes(object())
    with pytest.raises(PayloadError):
        payload_nbytes([1.5])


def test_put_get_delete_and_accounting():
    t = MemoryTier(1000)
    assert t.put("a", b"x" * 100) == 100
    t.put("b", b"y" * 50)
    assert t.used_bytes == 150 and len(t) == 2 and "a" in t
    t.put("a", b"z" * 10)  # replace
    assert t.used_bytes == 60 and t.get("a") == b"z" * 10
    assert t.delete("a") and not t.delete("a")
    assert t.used_bytes == 50 and t.get("a") is None
    assert t.get_many(["b", "q"]) == [b"y" * 50, None]
    assert t.contains_many(["b", "q"]) == [True, False]
    assert t.put_many([("c", b"1"), ("d", b"22")]) == 3
    assert t.delete_many(["c", "d", "zz"]) == 2
    assert sorted(t.keys()) == ["b"]


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"capacity": 0}, "capacity"), ({"capacity": 10, "high": 0.5, "low": 0.7}, "watermarks")],
)
def test_bad_tier_config(kw, match):
    with pytest.raises(ConfigError, match=match):
        MemoryTier(**kw)
