"""Sparse vector clocks: region -> counter, holding only the regions that updated a key.

A full version vector has one counter per region of the deployment (N); a key's clock here has
one per region that ever updated that key (K, usually 1-3), so its size follows K, not N. The
order is the usual one: ``a <= b`` when every counter of ``a`` is at most ``b``'s (a missing
entry is 0); two clocks neither of which is ``<=`` the other are concurrent.

The wire form is compact and self-describing (regions by name, counters as varints), so regions
need no shared table of region ids: ``count, (name length, name, counter) * count``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Literal

Order = Literal["equal", "before", "after", "concurrent"]


def put_varint(out: bytearray, n: int) -> None:
    if n < 0:
        raise ValueError(f"varint must be >= 0, got {n}")
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def get_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def put_str(out: bytearray, s: str) -> None:
    raw = s.encode()
    put_varint(out, len(raw))
    out += raw


def get_str(buf: bytes | memoryview, pos: int) -> tuple[str, int]:
    n, pos = get_varint(buf, pos)
    if pos + n > len(buf):
        raise ValueError("truncated string")
    return bytes(buf[pos : pos + n]).decode(), pos + n


class SparseClock(Mapping[str, int]):
    """Immutable. Entries are only ever positive: a region with no update has no entry."""

    __slots__ = ("_c", "_hash")

    def __init__(self, counters: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = counters.items() if isinstance(counters, Mapping) else counters
        c = {r: int(n) for r, n in items if n}
        if any(n < 0 for n in c.values()):
            raise ValueError(f"clock counters must be >= 0: {c}")
        self._c = dict(sorted(c.items()))
        self._hash: int | None = None

    def __getitem__(self, region: str) -> int:
        return self._c[region]

    def get(self, region: str, default: int = 0) -> int:  # type: ignore[override]
        return self._c.get(region, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._c)

    def __len__(self) -> int:
        return len(self._c)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(self._c.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SparseClock) and self._c == other._c

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{r}:{n}" for r, n in self._c.items()) + "}"

    def bump(self, region: str) -> SparseClock:
        c = dict(self._c)
        c[region] = c.get(region, 0) + 1
        return SparseClock(c)

    def merge(self, other: Mapping[str, int]) -> SparseClock:
        c = dict(self._c)
        for r, n in other.items():
            if n > c.get(r, 0):
                c[r] = n
        return SparseClock(c)

    def __le__(self, other: Mapping[str, int]) -> bool:
        return all(n <= other.get(r, 0) for r, n in self._c.items())

    def __lt__(self, other: Mapping[str, int]) -> bool:
        return self <= other and self._c != dict(other.items())

    def compare(self, other: SparseClock) -> Order:
        le, ge = self <= other, other <= self
        if le and ge:
            return "equal"
        if le:
            return "before"
        if ge:
            return "after"
        return "concurrent"

    def encode(self, out: bytearray | None = None) -> bytearray:
        out = bytearray() if out is None else out
        put_varint(out, len(self._c))
        for r, n in self._c.items():
            put_str(out, r)
            put_varint(out, n)
        return out

    @classmethod
    def decode(cls, buf: bytes | memoryview, pos: int = 0) -> tuple[SparseClock, int]:
        n, pos = get_varint(buf, pos)
        if n > 65536:
            raise ValueError(f"clock with {n} entries")
        items = []
        for _ in range(n):
            r, pos = get_str(buf, pos)
            c, pos = get_varint(buf, pos)
            items.append((r, c))
        return cls(items), pos


def full_vector_bytes(clock: Mapping[str, int], regions: list[str]) -> bytes:
    """The same clock as a full version vector over every region of the deployment (8-byte
    counters at positions both sides agree on): the baseline the benchmark compares with."""
    pos = {r: i for i, r in enumerate(regions)}
    out = bytearray(8 * len(regions))
    for r, n in clock.items():
        i = pos[r] * 8
        out[i : i + 8] = n.to_bytes(8, "big")
    return bytes(out)
