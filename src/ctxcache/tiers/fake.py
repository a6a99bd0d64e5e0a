"""Fake tiers for tests of the engine and of anything built on it (as httpx's MockTransport is for
clients): real tiers that log every storage call and fail on demand, without I/O.

- ``FakeTier``: a ``MemoryTier`` (hot: live objects) whose storage calls are logged.
- ``FakeSlowTier``: a slow, persistent blob tier (raw codec), like disk or Redis without I/O.

Both take ``on_call(name, keys)``, called before every storage operation (tests use it to assert,
for instance, that a slow tier is never called under the engine's lock), keep ``calls`` (the
operation names, in order), and fail on demand: keys in ``lose`` read as missing, and while
``down`` is set a slow tier is unhealthy, reads miss and writes are refused.
``RefuseDeletes`` is an ``on_call`` that makes every delete raise while it is on (a dead disk).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from ..codec import Block
from ..errors import CorruptBlockError
from .base import NO_META, BlockMeta, Tier, key_bytes
from .blob import BlobTier
from .memory import MemoryTier

OnCall = Callable[[str, tuple[Hashable, ...]], None]


class RefuseDeletes:
    """``on_call`` hook: while ``on``, every delete raises, as an unlink on a failing disk would;
    ``refused`` lists the keys whose delete raised."""

    def __init__(self) -> None:
        self.on = True
        self.refused: list[Hashable] = []

    def __call__(self, name: str, keys: tuple[Hashable, ...]) -> None:
        if name == "delete" and self.on:
            self.refused += keys
            raise OSError(5, "Input/output error")


class _Recorded(Tier):
    """What both fakes add to the tier they fake: the call log, the hook and the lost keys."""

    def __init__(self, capacity: int, policy: object = "lru", *, on_call: OnCall | None = None, **kw: Any) -> None:
        super().__init__(capacity, policy, **kw)
        self.on_call = on_call
        self.calls: list[str] = []
        self.lose: set[Hashable] = set()

    def _call(self, name: str, keys: Iterable[Hashable]) -> None:
        self.calls.append(name)
        if self.on_call is not None:
            self.on_call(name, tuple(keys))


class FakeTier(_Recorded, MemoryTier):
    kind = "fake"

    def get(self, key: Hashable) -> Any | None:
        self._call("get", [key])
        return None if key in self.lose else super().get(key)

    def get_many(self, keys: Iterable[Hashable]) -> list[Any | None]:
        return [self.get(k) for k in keys]  # MemoryTier reads its shards directly: log each key

    def put(self, key: Hashable, payload: Any, meta: BlockMeta = NO_META) -> int:
        self._call("put", [key])
        return super().put(key, payload, meta)

    def delete(self, key: Hashable) -> bool:
        self._call("delete", [key])
        return super().delete(key)


class FakeSlowTier(_Recorded, BlobTier):
    kind = "fake-slow"

    def __init__(self, capacity: int, policy: object = "lru", **kw: Any) -> None:
        super().__init__(capacity, policy, **kw)
        self.down = False
        self.store: dict[bytes, bytes] = {}  # "the backend": survives forget(), as disk files do

    @property
    def healthy(self) -> bool:
        return not self.down

    def load_many(
        self, keys: Sequence[Hashable], tokens: Sequence[bytes | None], unavailable: set[int] | None = None
    ) -> list[Block | None]:
        self._call("load_many", keys)
        out: list[Block | None] = []
        for i, (key, want) in enumerate(zip(keys, tokens)):
            kb = key_bytes(key)
            if self.down:  # unreachable, as a Redis server down: a miss, still stored and charged
                if unavailable is not None:
                    unavailable.add(i)
                out.append(None)
                continue
            blob = None if key in self.lose else self.store.get(kb)
            block = None
            if blob is not None:
                try:
                    block = self._codec.decode(blob, kb)
                except CorruptBlockError:
                    self.corrupt += 1
            if block is None:
                self._charge(kb, None)
            out.append(None if block is None or (want is not None and block.tokens != want) else block)
        return out

    def get_blob(self, key: Hashable) -> bytes | None:
        self._call("get_blob", [key])
        return None if self.down or key in self.lose else self.store.get(key_bytes(key))

    def put_blobs(self, items: Sequence[tuple[Hashable, bytes]]) -> list[bool]:
        self._call("put_blobs", [k for k, _ in items])
        if self.down:
            return [False] * len(items)
        for key, blob in items:
            kb = key_bytes(key)
            self.store[kb] = bytes(blob)
            self._landed(kb, len(blob))
        return [True] * len(items)

    def put_blob(self, key: Hashable, blob: bytes) -> int:
        if not self.put_blobs([(key, blob)])[0]:
            raise OSError(f"fake tier {self.name!r} is down")
        return len(blob)

    def delete(self, key: Hashable) -> bool:
        self._call("delete", [key])
        kb = key_bytes(key)
        self._charge(kb, None)
        return self.store.pop(kb, None) is not None


__all__ = ["FakeSlowTier", "FakeTier"]
