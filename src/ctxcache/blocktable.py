"""A table of cached blocks by slot id: the pure-Python reference for ``_native.BlockTable``.

Issue 30's first slice of a compiled index (docs/ARCHITECTURE.md, "The compiled block table"):
per block its fixed-width key, its parent (a slot, or for a root the namespace root key it was
inserted under), depth, children count, pins, tier, an int tag and its token bytes, plus a
key -> slot map and an LRU list over slots. Nothing in the cache uses it yet; the next slice puts
``RadixIndex`` on it.

``block_table()`` gives the compiled table when ``ctxcache._native`` has it, else this class. Both
hand out the same slots (the last freed first, else the next never used), keep the same LRU
order and raise the same exception types (tests/test_blocktable.py compares them):
TypeError for a wrong type; ValueError for a wrong width or a value out of range, for a block that
may not leave (children or pins) and for an unpin below zero; KeyError for an absent or duplicate
key; IndexError for a slot that is not a live block; BufferError for a non-contiguous buffer.
Ints are taken as ``operator.index`` takes them. Every argument is checked before the table is
read or changed.
"""

from __future__ import annotations

import operator
from typing import Any

from . import accel

NIL = -1
U32 = 2**32 - 1


def _uint(value: Any, top: int, what: str) -> int:
    v = operator.index(value)
    if not 0 <= v <= top:
        raise ValueError(f"{what} must be in [0, {top}]")
    return v


def _tokens(value: Any) -> bytes:
    view = memoryview(value)
    if not view.c_contiguous:
        raise BufferError("tokens must be a C-contiguous buffer")
    return view.tobytes()


class PyBlockTable:
    """``BlockTable(key_width=16, token_bytes=64)``: the same methods as the compiled table.

    A freed slot's fields are dropped (``_key[s] is None``); ``_next`` doubles as the free list's link.
    """

    def __init__(self, key_width: int = 16, token_bytes: int = 64) -> None:
        self.key_width = _uint(key_width, 256, "key_width")
        self.token_bytes = _uint(token_bytes, 1 << 20, "token_bytes")
        if not self.key_width or not self.token_bytes:
            raise ValueError("key_width and token_bytes must be positive")
        self._map: dict[bytes, int] = {}
        self._key: list[bytes | None] = []
        self._tok: list[bytes] = []
        self._parent: list[int] = []  # a slot, or NIL for a root
        self._pkey: list[bytes | None] = []  # a root's parent key
        self._depth: list[int] = []
        self._children: list[int] = []
        self._pins: list[int] = []
        self._tier: list[int] = []
        self._tag: list[int] = []
        self._prev: list[int] = []
        self._next: list[int] = []
        self._head = self._tail = self._free = NIL

    @property
    def slots_used(self) -> int:
        return len(self._key)

    def __len__(self) -> int:
        return len(self._map)

    def _k(self, key: Any, what: str = "key") -> bytes:
        if not isinstance(key, bytes):
            raise TypeError(f"{what} must be bytes, not {type(key).__name__}")
        if len(key) != self.key_width:
            raise ValueError(f"{what} must be {self.key_width} bytes, not {len(key)}")
        return bytes(key)

    def _live(self, slot: Any, /) -> int:
        s = operator.index(slot)
        if not 0 <= s < len(self._key) or self._key[s] is None:
            raise IndexError(f"slot {slot!r} is not a block of this table")
        return s

    def __contains__(self, key: Any, /) -> bool:
        return self._k(key) in self._map

    def get(self, key: Any, /) -> int:
        return self._map.get(self._k(key), NIL)

    def insert(self, key: Any, parent: Any, tokens: Any, depth: Any, tag: Any = 0, /) -> int:
        d, t = _uint(depth, U32, "depth"), _uint(tag, U32, "tag")
        k = self._k(key)
        pkey = None if parent is None else self._k(parent, "parent")
        if d > 0 and pkey is None:
            raise ValueError("a block of depth > 0 needs its parent's key")
        data = _tokens(tokens)
        if len(data) != self.token_bytes:
            raise ValueError(f"tokens must be {self.token_bytes} bytes, not {len(data)}")
        if k in self._map:
            raise KeyError("block already indexed")
        p = NIL
        if d > 0:
            if pkey not in self._map:
                raise KeyError("parent block is not indexed: a chain is inserted from its root")
            p = self._map[pkey]
            self._children[p] += 1
        s = self._alloc()
        self._key[s], self._tok[s], self._parent[s] = k, data, p
        self._pkey[s] = pkey if d == 0 else None
        self._depth[s], self._children[s], self._pins[s], self._tier[s], self._tag[s] = d, 0, 0, 0, t
        self._map[k] = s
        self._link_back(s)
        return s

    def _alloc(self) -> int:
        if self._free != NIL:
            s = self._free
            self._free = self._next[s]
            return s
        for col in (self._key, self._pkey):
            col.append(None)
        self._tok.append(b"")
        for icol in (self._parent, self._depth, self._children, self._pins, self._tier, self._tag):
            icol.append(0)
        self._prev.append(NIL)
        self._next.append(NIL)
        return len(self._key) - 1

    def remove(self, key: Any, /) -> None:
        k = self._k(key)
        if k not in self._map:
            raise KeyError("block not indexed")
        s = self._map[k]
        if self._children[s] or self._pins[s]:
            raise ValueError(f"cannot remove slot {s}: only unpinned leaves leave")
        self._unlink(s)
        del self._map[k]
        if self._parent[s] != NIL:
            self._children[self._parent[s]] -= 1
        self._key[s] = self._pkey[s] = None
        self._tok[s] = b""
        self._next[s] = self._free
        self._free = s

    def match(self, keys: Any, tokens: Any, /, *, touch: Any = False, slots: list[int] | None = None) -> int:
        """How many leading ``keys`` are indexed with stored tokens equal to their slice of ``tokens``."""
        move = bool(touch)
        if slots is not None and not isinstance(slots, list):
            raise TypeError(f"slots must be a list or None, not {type(slots).__name__}")
        try:
            seq = list(keys)
        except TypeError:
            raise TypeError("keys must be a sequence of bytes") from None
        data, w = _tokens(tokens), self.token_bytes
        if len(seq) * w > len(data):
            raise ValueError(f"{len(seq)} keys need {len(seq) * w} token bytes, the buffer has {len(data)}")
        for i, key in enumerate(seq):
            s = self._map.get(self._k(key), NIL)
            if s == NIL or self._tok[s] != data[i * w : (i + 1) * w]:
                return i
            if move:
                self.lru_touch(s)
            if slots is not None:
                slots.append(s)
        return len(seq)

    def key(self, slot: Any, /) -> bytes:
        return self._key[self._live(slot)]  # type: ignore[return-value]

    def tokens(self, slot: Any, /) -> bytes:
        return self._tok[self._live(slot)]

    def parent(self, slot: Any, /) -> int:
        return self._parent[self._live(slot)]

    def parent_key(self, slot: Any, /) -> bytes | None:
        s = self._live(slot)
        p = self._parent[s]
        return self._pkey[s] if p == NIL else self._key[p]

    def depth(self, slot: Any, /) -> int:
        return self._depth[self._live(slot)]

    def children(self, slot: Any, /) -> int:
        return self._children[self._live(slot)]

    def pins(self, slot: Any, /) -> int:
        return self._pins[self._live(slot)]

    def tier(self, slot: Any, /) -> int:
        return self._tier[self._live(slot)]

    def tag(self, slot: Any, /) -> int:
        return self._tag[self._live(slot)]

    def set_tier(self, slot: Any, tier: Any, /) -> None:
        s = operator.index(slot)
        t = _uint(tier, 255, "tier")
        self._tier[self._live(s)] = t

    def pin(self, slot: Any, /) -> int:
        s = self._live(slot)
        if self._pins[s] == U32:
            raise ValueError(f"slot {s} is pinned 2**32 - 1 times")
        self._pins[s] += 1
        return self._pins[s]

    def unpin(self, slot: Any, /) -> int:
        s = self._live(slot)
        if not self._pins[s]:
            raise ValueError(f"unpin of slot {s}, which is not pinned")
        self._pins[s] -= 1
        return self._pins[s]

    def _unlink(self, s: int) -> None:
        p, n = self._prev[s], self._next[s]
        if p != NIL:
            self._next[p] = n
        else:
            self._head = n
        if n != NIL:
            self._prev[n] = p
        else:
            self._tail = p

    def _link_back(self, s: int) -> None:
        self._prev[s], self._next[s] = self._tail, NIL
        if self._tail != NIL:
            self._next[self._tail] = s
        else:
            self._head = s
        self._tail = s

    def lru_touch(self, slot: Any, /) -> None:
        s = self._live(slot)
        if s != self._tail:
            self._unlink(s)
            self._link_back(s)

    def lru_front(self) -> int:
        return self._head

    def lru_next(self, slot: Any, /) -> int:
        return self._next[self._live(slot)]

    def memory_bytes(self) -> int:
        """A rough figure (list slots and dict entries, not the objects): the compiled table's is exact."""
        return 8 * 12 * len(self._key) + 40 * len(self._map)


BlockTable = PyBlockTable


def block_table(key_width: int = 16, token_bytes: int = 64) -> Any:
    """The compiled table when ``ctxcache._native`` is built with it (and not disabled), else the reference."""
    cls = getattr(accel.native, "BlockTable", None) or PyBlockTable
    return cls(key_width, token_bytes)
