"""MemoryTier: blocks in process memory, either as live objects (hot) or encoded (warm).

Hot mode keeps the objects the caller stored and hands them back without copies; it charges
their measured size. Warm mode keeps each block encoded by the codec (optionally fp16/k16v8/int8
and compressed), so RAM holds more context per byte, and decodes on every load (zero-copy for
mode raw): a load is verified (checksum, key, token bytes) like one from disk.
Memory tiers are not thread-safe; the engine only touches them under its lock.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .. import accel
from ..codec import Block, Codec
from ..errors import ConfigError, CorruptBlockError, PayloadError
from ..payload import check_payload
from ..shardmap import ShardedDict, tier_shard
from .base import NO_META, BlockMeta, Tier, key_bytes


def payload_nbytes(obj: Any) -> int:
    """Bytes held by a payload: bytes-like, numpy array, torch tensor, or dict/list/tuple of them.

    Array views count their own extent, not their base buffer's. Unknown types are an error rather
    than a guess, because a wrong size breaks the capacity guarantee.
    """
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, memoryview):
        return obj.nbytes
    if isinstance(obj, str):
        return len(obj.encode())
    if isinstance(obj, Mapping):
        return sum(payload_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(payload_nbytes(v) for v in obj)
    if obj is None:
        return 0
    # numpy arrays and torch tensors both expose an exact .nbytes; avoid importing torch.
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int) and hasattr(obj, "shape"):
        return nbytes
    raise PayloadError(
        f"cannot size a payload of type {type(obj).__name__}: use bytes, numpy arrays, "
        "torch tensors, or dicts/lists of them"
    )


class MemoryTier(Tier):
    kind = "memory"
    # Its maps are sharded by key hash, so it keeps no global insertion order; it is never
    # persistent, so no policy learns its keys at start (only shutdown's spill lists them).
    ordered_keys = False

    def __init__(
        self,
        capacity: int,
        policy: Any = "lru",
        *,
        mode: str = "hot",
        codec: str = "raw",
        compression: str = "none",
        compression_level: int | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(capacity, policy, **kw)
        if mode not in ("hot", "warm"):
            raise ConfigError(f"memory tier mode must be 'hot' or 'warm', got {mode!r}")
        if mode == "hot" and (codec != "raw" or compression != "none"):
            raise ConfigError("codec and compression apply to mode 'warm' only (hot keeps live objects)")
        self.mode = mode
        self.codec = Codec(codec, compression, compression_level) if mode == "warm" else None
        # Sharded (no insert rebuilds a table of every block). Sizes are stored only where they
        # differ from the first one stored: a model's KV blocks are all the same size, so the
        # usual case is one entry per block (the payload), not two.
        self._data: ShardedDict[Hashable, Any] = ShardedDict(tier_shard)
        self._dshards = self._data.shards
        # get_many's loop compiled (accel.py), as the hasher chooses its walk: at construction.
        self._gets = getattr(accel.native, "shard_get_many", None)
        self._sizes: ShardedDict[Hashable, int] = ShardedDict(tier_shard)
        self._common: int | None = None

    def size_of(self, payload: Any) -> int:
        if self.codec is None:
            # Checked here too, not only in ``put``: a store measures before it takes the lock, so a
            # payload ``put`` would refuse stores nothing (it left an indexed block with no payload).
            size = payload_nbytes(payload)
            check_payload(payload)
            return size
        return self.codec.encoded_size(payload, 16, self.token_bytes)

    def nbytes(self, key: Hashable) -> int:
        size = self._sizes.get(key)
        if size is not None:
            return size
        return self._common if self._common is not None and key in self._data else 0

    def _decode(self, key: Hashable, blob: bytes) -> Block | None:
        assert self.codec is not None
        try:
            return self.codec.decode(blob, key_bytes(key))
        except CorruptBlockError:
            self.corrupt += 1
            self.delete(key)
            return None

    def get(self, key: Hashable) -> Any | None:
        blob = self._dshards[hash(key) % 241].get(key)
        if self.codec is None:
            return blob
        block = None if blob is None else self._decode(key, blob)
        return None if block is None else block.payload

    def get_many(self, keys: Iterable[Hashable]) -> list[Any | None]:
        if self.codec is None:
            shards = self._dshards
            if self._gets is not None:
                return self._gets(shards, keys, 241)  # type: ignore[no-any-return]
            return [shards[hash(k) % 241].get(k) for k in keys]
        return [self.get(k) for k in keys]

    def load_many(
        self, keys: Sequence[Hashable], tokens: Sequence[bytes | None], unavailable: set[int] | None = None
    ) -> list[Block | None]:
        if self.codec is None:
            return super().load_many(keys, tokens)
        out: list[Block | None] = []
        for key, want in zip(keys, tokens):
            blob = self._data.get(key)
            block = None if blob is None else self._decode(key, blob)
            out.append(None if block is None or (want is not None and block.tokens != want) else block)
        return out

    def put(self, key: Hashable, payload: Any, meta: BlockMeta = NO_META) -> int:
        if self.codec is None:
            check_payload(payload)  # what this tier takes, every tier takes (it may be spilled later)
            return self._store(key, payload, payload_nbytes(payload))
        blob = self.codec.encode(payload, key_bytes(key), meta.tokens, meta.parent, meta.depth, meta.tenant)
        return self._store(key, blob, len(blob))

    def get_blob(self, key: Hashable) -> bytes | None:
        return self._data.get(key) if self.codec is not None else super().get_blob(key)

    def put_blob(self, key: Hashable, blob: bytes) -> int:
        if self.codec is None:
            return super().put_blob(key, blob)
        return self._store(key, bytes(blob), len(blob))

    def _store(self, key: Hashable, value: Any, size: int) -> int:
        if self._common is None:
            self._common = size
        h = hash(key) % 241
        data, sizes = self._dshards[h], self._sizes.shards[h]
        old = sizes.pop(key, None)
        if old is None:
            old = self._common if key in data else 0
        self.used_bytes += size - old
        data[key] = value
        if size != self._common:
            sizes[key] = size
        return size

    # ``put`` of a payload ``size_of`` took (checked; ``size`` bytes), in hot mode: the store's fast
    # path (engine/store_simple.py) measures once, not twice, and makes one call, not two.
    put_measured = _store

    def delete(self, key: Hashable) -> bool:
        h = hash(key) % 241
        data = self._dshards[h]
        if key not in data:
            return False
        del data[key]
        self.used_bytes -= self._sizes.shards[h].pop(key, self._common or 0)
        return True

    def __contains__(self, key: object) -> bool:
        return key in self._dshards[hash(key) % 241]

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> Iterator[Hashable]:
        return iter(list(self._data))

    def payloads(self) -> list[Any]:
        """What the tier holds (live objects, or blobs in mode warm), for memory diagnostics.
        Another thread may store meanwhile: a shard that changed while read is read again."""
        for _ in range(3):
            try:
                return list(self._data.values())
            except RuntimeError:
                continue
        return []

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["mode"] = self.mode
        if self.codec is not None:
            out["codec"], out["compression"] = self.codec.mode, self.codec.compression
        return out
