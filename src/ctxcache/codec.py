"""Block codec: one self-describing, checksummed blob per cached block, decoded without copies.

Layout (little-endian): a fixed header (magic, version, mode, compression, payload kind, key and
parent lengths, depth, array count, token-bytes length, header length, raw and stored payload
lengths, xxh3-64 of the stored payload, xxh3-64 of the header); the key, parent key and token
bytes; an array table (stored and original dtype, shape, name, 64-byte aligned offsets of each
buffer and of its scale buffer); then the payload's raw buffers, compressed as a whole with lz4
or zstd when that makes them smaller.

The token bytes let a block read from any tier be verified against the request like an in-memory
hit, and let a restarted process (or another one sharing a store) index blocks it never wrote.
Header and payload are both checksummed, so damage is caught before any buffer is interpreted.
Decoding parses integers and returns numpy views of the blob: no pickle, nothing executable, and
any inconsistency raises ``CorruptBlockError`` and nothing else.

Modes (how floating-point arrays are stored; other dtypes are always stored as they are):
``raw`` as given; ``fp16`` float16; ``k16v8`` keys float16 and values int8 with one float16
scale per token row (arrays at even positions are keys, odd positions values: the
[K0, V0, K1, V1, ...] layout, which (K, V) pairs per layer give explicitly); ``int8`` every
float array int8 with per-row scales. Decoding restores each array's original dtype (bfloat16
comes back as float32, which numpy can represent exactly). Error bounds: docs/storage.md.
"""

from __future__ import annotations

import importlib
import math
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import xxhash

from .codec_arrays import _F16, _FLOATS, _I8, ALIGN, MODES, _array, _quantize, _rebuild, _to_f16
from .errors import ConfigError, CorruptBlockError, MissingDependencyError, PayloadError
from .payload import _BF16, _DTYPES, ARRAY, BYTES, flatten

MAGIC = b"CTXB"
FORMAT_VERSION = 2  # 2: the header carries the owning tenant, and the payload may be sealed
READABLE_VERSIONS = (1, 2)  # a version-1 header is a version-2 one with no tenant, unsealed
SEAL_OVERHEAD = 28  # AES-GCM: a 12-byte nonce and a 16-byte tag
SEALED = 0x80  # flag on the payload-kind byte: the stored payload is AES-GCM ciphertext
COMPRESSIONS: tuple[str, ...] = ("none", "lz4", "zstd")
_FIXED = struct.Struct("<4sHBBBBBBIIIIQQQQ")  # 60 bytes; header_sum is the last field
_SUM_AT = _FIXED.size - 8
FIXED_HEADER_SIZE = _FIXED.size
_ENTRY = struct.Struct("<BBBBH2xQQQQ")
_MAX_NDIM, _MAX_ARRAYS, _MAX_NAME = 16, 1 << 16, 1 << 12


@dataclass(frozen=True, slots=True)
class Block:
    """A decoded block: identity and tokens from the header, the payload, the blob's size."""

    key: bytes
    parent: bytes
    depth: int
    tokens: bytes
    payload: Any
    nbytes: int
    tenant: bytes = b""


@dataclass(frozen=True, slots=True)
class Header:
    key: bytes
    parent: bytes
    depth: int
    tokens: bytes
    header_len: int
    total_len: int
    tenant: bytes = b""
    sealed: bool = False


class Sealer(Protocol):
    """Encryption at rest, per tenant (``engine/sealing.py``: AES-GCM). ``aad`` binds the block's
    identity (key, parent, depth, tenant, token bytes): a block edited, or copied under another
    key or tenant, fails to open. ``open`` raises any exception on failure."""

    def seal(self, tenant: bytes, aad: bytes, data: bytes) -> bytes: ...

    def open(self, tenant: bytes, aad: bytes, data: Any) -> bytes: ...


def _aad(key: bytes, parent: bytes, depth: int, tenant: bytes, tokens: bytes) -> bytes:
    parts = (key, parent, tenant, tokens, depth.to_bytes(4, "little"))
    return b"ctxcache/block/v2" + b"".join(len(x).to_bytes(4, "little") + x for x in parts)


def _compressor(name: str) -> Any:
    """The module behind a compression name, or a clear error naming the package to install."""
    pkg = {"lz4": "lz4.block", "zstd": "zstandard"}[name]
    try:
        return importlib.import_module(pkg)
    except ImportError:
        raise MissingDependencyError(
            f"compression {name!r} needs the {pkg.split('.')[0]!r} package: pip install 'ctxcache[redis]'"
        ) from None


class Codec:
    """Encodes payloads into blobs and back, with one mode and compression (validated here)."""

    def __init__(
        self, mode: str = "raw", compression: str = "none", level: int | None = None, max_bytes: int = 1 << 30
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"unknown codec mode {mode!r}; known: {', '.join(MODES)}")
        if compression not in COMPRESSIONS:
            raise ConfigError(f"unknown compression {compression!r}; known: {', '.join(COMPRESSIONS)}")
        self.mode, self.compression, self.level, self.max_bytes = mode, compression, level, max_bytes
        self.sealer: Sealer | None = None  # set by the engine when encryption at rest is on
        self._mode_id, self._comp_id = MODES.index(mode), COMPRESSIONS.index(compression)
        if compression != "none":
            _compressor(compression)  # fail at configuration time, not at the first demotion

    def same_format(self, other: Codec) -> bool:
        """Blobs of one are blobs of the other (moved between tiers without re-encoding)."""
        return (self.mode, self.compression, self.sealer) == (other.mode, other.compression, other.sealer)

    # --- encoding ----------------------------------------------------------------------------------
    def _storage(self, i: int, code: int, ndim: int, kind: int) -> int:
        """How array ``i`` is stored: as given (its own code), float16 (_F16) or int8 + scales (_I8)."""
        if code not in _FLOATS or self.mode == "raw" or kind == BYTES:
            return code
        if ndim >= 1 and (self.mode == "int8" or (self.mode == "k16v8" and i % 2 == 1)):
            return _I8
        return _F16

    def _plan(self, payload: Any) -> tuple[int, list[tuple[str, int, int, tuple[int, ...], np.ndarray, Any]]]:
        """(kind, [(name, stored code, original code, shape, stored array, scale or None)])."""
        kind, arrays = flatten(payload)
        out = []
        for i, (name, a, code) in enumerate(arrays):
            stored, scale, scode = a, None, self._storage(i, code, a.ndim, kind)
            if scode == _I8 and code != _I8:
                stored, scale = _quantize((a.astype(np.uint32) << 16).view(np.float32) if code == _BF16 else a)
            elif scode != code:
                stored = _to_f16(a, code)
            out.append((name, scode, code, tuple(a.shape), stored, scale))
        return kind, out

    def encode(
        self, payload: Any, key: bytes, tokens: bytes = b"", parent: bytes = b"", depth: int = 0, tenant: bytes = b""
    ) -> bytes:
        """The blob of one block, owned by ``tenant`` (sealed with its key when a sealer is set).
        Raises PayloadError for payloads it cannot represent."""
        if len(key) > 255 or len(parent) > 255 or len(tenant) > 255 or not 0 <= depth < 1 << 32:
            raise PayloadError("block keys and tenant ids are at most 255 bytes and depth fits in 32 bits")
        kind, plan = self._plan(payload)
        if len(plan) >= _MAX_ARRAYS:
            raise PayloadError(f"a block holds fewer than {_MAX_ARRAYS} arrays, got {len(plan)}")
        table: list[bytes] = []
        parts: list[Any] = []
        off = 0
        for name, scode, code, shape, stored, scale in plan:
            nm = name.encode()
            if len(shape) > _MAX_NDIM or len(nm) > _MAX_NAME:
                raise PayloadError(f"arrays have at most {_MAX_NDIM} dims and {_MAX_NAME}-byte names")
            spans = []
            for b in [stored] if scale is None else [stored, scale]:  # each buffer 64-byte aligned
                parts += [b.reshape(-1).view(np.uint8).data, bytes(-b.nbytes % ALIGN)]
                spans.append((off, b.nbytes))
                off += b.nbytes + -b.nbytes % ALIGN
            (o, n), (so, sn) = spans[0], spans[1] if scale is not None else (0, 0)
            table.append(_ENTRY.pack(scode, code, len(shape), scale is not None, len(nm), o, n, so, sn))
            table.append(struct.pack(f"<{len(shape)}Q", *shape) + nm)
        raw_len, comp = off, 0
        if self._comp_id:
            mod, raw = _compressor(self.compression), b"".join(parts)
            if self.compression == "zstd":
                packed = mod.ZstdCompressor(level=self.level or 3).compress(raw)
            else:
                packed = mod.compress(raw, store_size=False)
            if len(packed) < raw_len:
                parts, comp = [packed], self._comp_id
        if self.sealer is not None:
            parts = [self.sealer.seal(tenant, _aad(key, parent, depth, tenant, tokens), b"".join(parts))]
            kind |= SEALED
        h = xxhash.xxh3_64()
        deque(map(h.update, parts), maxlen=0)
        payload_len = sum(len(p) for p in parts)
        var = key + parent + tenant + tokens + b"".join(table)
        hlen = _FIXED.size + len(var) + -(_FIXED.size + len(var)) % ALIGN
        fixed = [MAGIC, FORMAT_VERSION, self._mode_id, comp, kind, len(key), len(parent), len(tenant), depth]
        fixed += [len(plan)]
        fixed += [len(tokens), hlen, raw_len, payload_len, h.intdigest()]
        head = bytearray(_FIXED.pack(*fixed, 0) + var + bytes(hlen - _FIXED.size - len(var)))
        struct.pack_into("<Q", head, _SUM_AT, xxhash.xxh3_64_intdigest(head))
        return b"".join([head, *parts])

    def encoded_size(self, payload: Any, key_len: int = 16, tokens_len: int = 0, tenant_len: int = 0) -> int:
        """Bytes ``encode`` will produce at most (exact without compression), without encoding."""
        kind, arrays = flatten(payload)
        hlen, off = _FIXED.size + 2 * key_len + tokens_len + tenant_len, 0
        for i, (name, a, code) in enumerate(arrays):
            hlen += _ENTRY.size + 8 * a.ndim + len(name.encode())
            scode = self._storage(i, code, a.ndim, kind)
            sizes = (
                [a.size, 2 * math.prod(a.shape[:-1])] if scode == _I8 != code else [a.size * _DTYPES[scode].itemsize]
            )
            off += sum(n + -n % ALIGN for n in sizes)
        return hlen + -hlen % ALIGN + off + (SEAL_OVERHEAD if self.sealer is not None else 0)

    # --- decoding ----------------------------------------------------------------------------------
    def decode(self, blob: Any, key: bytes | None = None) -> Block:
        """Verify and decode a blob (any codec settings). Raises only CorruptBlockError."""
        try:
            return self._decode(blob, key)
        except CorruptBlockError:
            raise
        except Exception as exc:  # a blob must never get anything else out of us
            raise CorruptBlockError(f"undecodable block: {type(exc).__name__}: {exc}") from None

    def _decode(self, blob: Any, key: bytes | None) -> Block:
        mv = memoryview(blob).cast("B")
        head = read_header(mv)
        if key is not None and head.key != key:
            raise CorruptBlockError("block key in the header differs from the key it was stored under")
        if len(mv) != head.total_len:
            raise CorruptBlockError(f"blob is {len(mv)} B, header says {head.total_len} B (truncated?)")
        f = _FIXED.unpack_from(mv)
        mode, comp, kind, n_arrays, raw_len, payload_len, psum = f[2], f[3], f[4], f[9], f[12], f[13], f[14]
        body: Any = mv[head.header_len :]
        if xxhash.xxh3_64_intdigest(body) != psum:
            raise CorruptBlockError("payload checksum mismatch")
        if head.sealed:
            body = self._open(head, body)
            kind, payload_len = kind & ~SEALED, len(body)
        if comp == 0:
            if raw_len != payload_len:
                raise CorruptBlockError("uncompressed payload length mismatch")
            raw: Any = body
        else:
            if raw_len > self.max_bytes:
                raise CorruptBlockError(f"block claims {raw_len} B uncompressed, over the {self.max_bytes} B limit")
            raw = self._decompress(COMPRESSIONS[comp], body, raw_len)
        pos = _FIXED.size + len(head.key) + len(head.parent) + len(head.tenant) + len(head.tokens)
        arrays = []
        for _ in range(n_arrays):
            scode, code, ndim, quant, name_len, off, n, soff, sn = _ENTRY.unpack_from(mv, pos)
            pos += _ENTRY.size
            if ndim > _MAX_NDIM or scode not in _DTYPES or code not in _DTYPES or quant > 1:
                raise CorruptBlockError("bad array entry")
            shape = struct.unpack_from(f"<{ndim}Q", mv, pos)
            pos += 8 * ndim
            name = bytes(mv[pos : pos + name_len]).decode()
            pos += name_len
            if pos > head.header_len:
                raise CorruptBlockError("array table overruns the header")
            arrays.append((name, _array(raw, raw_len, scode, code, shape, quant, off, n, soff, sn, mode)))
        return Block(head.key, head.parent, head.depth, head.tokens, _rebuild(kind, arrays), len(mv), head.tenant)

    def _open(self, head: Header, body: Any) -> bytes:
        if self.sealer is None:
            raise CorruptBlockError("the block is encrypted and no key is configured: it is a miss")
        aad = _aad(head.key, head.parent, head.depth, head.tenant, head.tokens)
        try:
            return self.sealer.open(head.tenant, aad, body)
        except Exception:
            raise CorruptBlockError(
                "the block failed authentication: edited, or copied from another key or tenant"
            ) from None

    @staticmethod
    def _decompress(name: str, body: memoryview, raw_len: int) -> bytes:
        mod = _compressor(name)
        zstd = name == "zstd"
        out = mod.ZstdDecompressor().decompress(body, raw_len) if zstd else mod.decompress(body, raw_len)
        if len(out) != raw_len:
            raise CorruptBlockError("decompressed payload length mismatch")
        return bytes(out)


def read_header(buf: Any) -> Header:
    """Parse and verify a blob's header (not its payload). ``buf`` needs at least the header's bytes.

    Used on its own to rebuild a disk index from file heads. Raises only CorruptBlockError.
    """
    try:
        mv = memoryview(buf).cast("B")
        if len(mv) < _FIXED.size:
            raise CorruptBlockError(f"blob of {len(mv)} B is shorter than a block header")
        f = _FIXED.unpack_from(mv)
        magic, version, mode, comp, kind, klen, plen, nlen, depth, _, tlen, hlen = f[:12]
        if magic != MAGIC:
            raise CorruptBlockError("not a ctxcache block (bad magic)")
        if version not in READABLE_VERSIONS:
            raise CorruptBlockError(f"block format version {version}, this build reads {READABLE_VERSIONS}")
        if version == 1 and (nlen or kind & SEALED):
            raise CorruptBlockError("a version-1 block carries no tenant and is never sealed")
        if mode >= len(MODES) or comp >= len(COMPRESSIONS) or kind & ~SEALED > ARRAY:
            raise CorruptBlockError("unknown mode, compression or payload kind")
        if hlen % ALIGN or hlen < _FIXED.size + klen + plen + nlen + tlen or hlen > len(mv):
            raise CorruptBlockError("bad header length (truncated?)")
        h = xxhash.xxh3_64()
        h.update(mv[:_SUM_AT])
        h.update(bytes(8))
        h.update(mv[_SUM_AT + 8 : hlen])
        if h.intdigest() != f[15]:
            raise CorruptBlockError("header checksum mismatch")
        p = _FIXED.size
        key, parent = bytes(mv[p : p + klen]), bytes(mv[p + klen : p + klen + plen])
        p += klen + plen
        tenant, tokens = bytes(mv[p : p + nlen]), bytes(mv[p + nlen : p + nlen + tlen])
        return Header(key, parent, depth, tokens, hlen, hlen + f[13], tenant, bool(kind & SEALED))
    except CorruptBlockError:
        raise
    except Exception as exc:
        raise CorruptBlockError(f"undecodable block header: {type(exc).__name__}: {exc}") from None


def header_length(prefix: Any) -> int:
    """Header length from the first FIXED_HEADER_SIZE bytes (unverified: read_header checks it)."""
    mv = memoryview(prefix).cast("B")
    if len(mv) < _FIXED.size or bytes(mv[:4]) != MAGIC:
        raise CorruptBlockError("not a ctxcache block (bad magic or too short)")
    return int(_FIXED.unpack_from(mv)[11])
