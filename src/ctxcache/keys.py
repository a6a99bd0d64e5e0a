"""Block keys: tokens are cut into fixed-size blocks, each keyed by a chained hash.

key(block i) = H(key(block i-1) || int32 token bytes of block i), and the chain starts at a
namespace root derived from (model fingerprint, tenant, salt, format version). Equal keys
therefore mean "same tokens from the very first one, under the same model and tenant".

H is xxh3-128 seeded from the namespace secret by default. It is not collision resistant against
an attacker, so the index keeps every block's token bytes and verifies each hit (see index.py):
a collision becomes a miss, never another prompt's KV. Keyed BLAKE3 (``hash="blake3"``) is for
keys that leave the process, where another party may see or choose them.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import blake3
import numpy as np
import xxhash

from . import accel
from .errors import ConfigError, InvalidTokensError, TokenTypeError

FORMAT_VERSION = 1
KEY_BYTES = 16
HashName = Literal["xxh3", "blake3"]
HASHES: tuple[str, ...] = ("xxh3", "blake3")
Tokens = Sequence[int] | np.ndarray
_INT32_MAX = 2**31 - 1
_NATIVE_I4 = np.dtype(np.int32)
# The byte of each native int32 that holds its sign: 3 of every 4 on a little-endian machine.
_SIGN_BYTE = 3 if sys.byteorder == "little" else 0


class _Stored(Protocol):
    tokens: bytes


S = TypeVar("S", bound=_Stored)


def _field(data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return len(raw).to_bytes(4, "little") + raw


@dataclass(frozen=True)
class Namespace:
    """Where a chain of keys lives. Nothing is shared across namespaces."""

    tenant: str = "default"
    model: str = "default"
    salt: bytes = b""
    version: int = FORMAT_VERSION
    secret: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tenant, str) or not isinstance(self.model, str):
            raise TypeError("Namespace tenant and model must be str")
        # Length-prefixed fields: ("ab", "c") and ("a", "bc") must not collide.
        material = b"ctxcache/namespace" + b"".join(
            _field(x) for x in (self.model, self.tenant, self.salt, str(self.version))
        )
        object.__setattr__(self, "secret", blake3.blake3(material).digest(32))
        object.__setattr__(self, "_root", self.secret[:KEY_BYTES])  # read by every walk: sliced once

    @property
    def root(self) -> bytes:
        """The parent key of block 0."""
        return self._root  # type: ignore[attr-defined,no-any-return]


def as_token_array(tokens: Tokens) -> np.ndarray:
    """Validate tokens and return them as a contiguous int32 array (no copy when already so)."""
    if isinstance(tokens, np.ndarray):
        # What every engine request passes (int32 ids). A numpy reduction costs ~1.5 µs at any
        # length; every sign byte below 0x80 (an ASCII check, a C scan of a strided copy) is the
        # same bound, non-negative, in ~0.3 µs for 128 tokens.
        if (
            tokens.dtype is _NATIVE_I4
            and tokens.ndim == 1
            and tokens.flags.c_contiguous
            and tokens.tobytes()[_SIGN_BYTE::4].isascii()
        ):
            return tokens
        arr = tokens
    elif isinstance(tokens, (str, bytes, bytearray)) or not isinstance(tokens, Sequence):
        raise TokenTypeError(
            f"tokens must be a sequence of ints or an integer numpy array, not {type(tokens).__name__}"
        )
    else:
        try:
            # Let numpy infer the dtype: a float, str or huge int anywhere shows up in it.
            arr = np.asarray(tokens)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidTokensError(f"token ids must be integers: {exc}") from None
        if arr.dtype == object:
            bad = next((t for t in tokens if not _is_int(t) or not 0 <= t <= _INT32_MAX), None)
            raise InvalidTokensError(f"token ids must be int32 integers; got {bad!r}")
    if arr.ndim == 1 and arr.size == 0:
        return np.empty(0, dtype="<i4")
    if arr.ndim != 1:
        raise InvalidTokensError(f"tokens must be one-dimensional, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":  # signed or unsigned ints (not bool: kind "b"); np.issubdtype costs ~1 µs
        raise InvalidTokensError(f"token ids must be integers, got dtype {arr.dtype}")
    if arr.size and int(_as_unsigned(arr).max()) > _INT32_MAX:
        # One reduction checks both bounds: viewed as unsigned, a negative id is huge.
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0:
            raise InvalidTokensError(f"token ids must be non-negative; found {lo}")
        raise InvalidTokensError(f"token ids must fit in int32; found {hi}")
    return np.ascontiguousarray(arr, dtype="<i4")


def _as_unsigned(arr: np.ndarray) -> np.ndarray:
    # The zero-copy view reinterprets bytes: only right in the native byte order.
    if arr.dtype.kind == "i" and arr.dtype.isnative and arr.dtype.itemsize >= 4 and arr.flags.c_contiguous:
        return arr.view(np.dtype(f"u{arr.dtype.itemsize}"))
    if arr.dtype.kind == "i":
        return arr.astype(np.int64).view(np.uint64)
    return arr


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class BlockHasher:
    """Cuts token arrays into blocks and computes their chained keys.

    ``_stream`` is the one loop that chains keys; ``walk`` (every lookup), ``chain`` and
    ``iter_keys`` all consume it, and a ``Prompt`` remembers what it yielded.
    """

    def __init__(self, block_size: int = 256, hash: str = "xxh3") -> None:
        if not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"block_size must be a positive int, got {block_size!r}")
        if hash not in HASHES:
            raise ConfigError(f"unknown hash {hash!r}; known: {', '.join(HASHES)}")
        self.block_size = block_size
        self.hash = hash
        self._stride = block_size * 4
        # The compiled walk (accel.py) when it is built and not switched off; None: pure Python.
        self._native = accel.native
        self._kind = HASHES.index(hash)

    def n_blocks(self, n_tokens: int) -> int:
        """Full blocks in ``n_tokens``: the trailing partial block is never cached."""
        return n_tokens // self.block_size

    def block_bytes(self, arr: np.ndarray) -> list[bytes]:
        """The int32 bytes of each full block of a validated array."""
        buf = arr.tobytes()
        s = self._stride
        return [buf[i * s : (i + 1) * s] for i in range(len(arr) // self.block_size)]

    def _stream(self, buf: bytes, ns: Namespace, parent: bytes, start: int, stop: int) -> Iterator[bytes]:
        """Keys of blocks ``start`` .. ``stop - 1`` of ``buf``, chained on ``parent`` (the key of
        block ``start - 1``, or the namespace root). Compiled: all at once (~50 ns a block)."""
        if self._native is not None:
            return iter(self._native.chain(buf, self._stride, start, stop, parent, ns.secret, self._kind))
        return self._py_stream(buf, ns, parent, start, stop)

    def _py_stream(self, buf: bytes, ns: Namespace, parent: bytes, start: int, stop: int) -> Iterator[bytes]:
        """The pure-Python ``_stream``, and its reference. Lazy: a lookup that misses at block 0
        hashes one block."""
        s = self._stride
        if self.hash == "xxh3":
            # One call on parent + block (an 80-byte copy) gives the streaming hasher's digest in
            # a third of its three calls: keys are unchanged, so stored blocks stay reachable.
            digest = xxhash.xxh3_128_digest
            seed = int.from_bytes(ns.secret[16:24], "little")
            for off in range(start * s, stop * s, s):
                parent = digest(parent + buf[off : off + s], seed)
                yield parent
        else:
            view = memoryview(buf)
            template = blake3.blake3(key=ns.secret)
            for off in range(start * s, stop * s, s):
                b = template.copy()
                b.update(parent)
                b.update(view[off : off + s])
                parent = b.digest(KEY_BYTES)
                yield parent

    def prompt(self, tokens: Tokens, ns: Namespace) -> Prompt:
        """Validate ``tokens`` once and wrap them with ``ns`` for the whole request path."""
        if self._native is not None:
            # Validated and cut to int32 bytes in one C pass; None: as_token_array decides (and
            # names what is wrong). The tokens are the caller's array when already native int32.
            buf = self._native.token_bytes(tokens)
            if buf is not None:
                ok = tokens.__class__ is np.ndarray and tokens.dtype is _NATIVE_I4  # type: ignore[union-attr]
                arr = tokens if ok else np.frombuffer(buf, _NATIVE_I4)
                return Prompt(self, arr, ns, None, buf)  # type: ignore[arg-type]  # positional: ~100 ns less
        return Prompt(self, as_token_array(tokens), ns)

    def chain(self, arr: np.ndarray, ns: Namespace) -> Iterator[tuple[bytes, bytes]]:
        """Yield (key, token bytes) of each full block of a validated array, in order."""
        buf = arr.tobytes()
        s = self._stride
        for i, key in enumerate(self._stream(buf, ns, ns.root, 0, len(arr) // self.block_size)):
            yield key, buf[i * s : (i + 1) * s]

    def walk(
        self,
        prompt: Prompt,
        get: Callable[[bytes], S | None] | None = None,
        shards: Sequence[Mapping[Any, S]] | None = None,
    ) -> list[S]:
        """The longest prefix of blocks found (by ``get``, or in ``shards``: a sharded map's dicts,
        picked by a key's last byte: ``shardmap.index_shard`` of a bytes key) with equal stored token
        bytes.

        This is every lookup's hot loop: it stops at the first miss (a cold lookup hashes one
        block), reuses keys the prompt already knows, and compares a stored block with the
        request's buffer in place (``startswith`` at the block offset), copying nothing. Given
        ``shards``, it indexes them inline rather than calling a function per block.
        """
        if self._native is not None:
            ns = prompt.namespace
            found: list[S] = self._native.walk(
                prompt.buf, self._stride, prompt.n_blocks, prompt._keys, ns.root, ns.secret, self._kind, shards, get
            )
            return found
        buf, keys, n = prompt.buf, prompt._keys, prompt.n_blocks
        same = buf.startswith
        s = self._stride
        out: list[S] = []
        off = 0
        for key in keys[:n]:
            item = shards[key[-1]].get(key) if shards is not None else get(key)  # type: ignore[misc]
            if item is None or not same(item.tokens, off):
                return out
            out.append(item)
            off += s
        if len(keys) >= n:
            return out
        parent = keys[-1] if keys else prompt.namespace.root
        for key in self._stream(buf, prompt.namespace, parent, len(keys), n):
            keys.append(key)
            item = shards[key[-1]].get(key) if shards is not None else get(key)  # type: ignore[misc]
            if item is None or not same(item.tokens, off):
                break
            out.append(item)
            off += s
        return out

    def iter_keys(self, blocks: Sequence[bytes], ns: Namespace, start: int = 0) -> Iterator[bytes]:
        """Yield the key of each block in ``blocks`` (token bytes), skipping the first ``start``."""
        return itertools.islice(self._stream(b"".join(blocks), ns, ns.root, 0, len(blocks)), start, None)

    def keys(self, tokens: Tokens, ns: Namespace) -> list[bytes]:
        """All full-block keys of ``tokens`` under ``ns``."""
        return self.prompt(tokens, ns).keys()


class Prompt:
    """One request's tokens, validated once, and their block keys, each hashed at most once.

    Made by ``ContextCache.prompt`` (or ``BlockHasher.prompt``); lookup, store, discovery and the
    server's pins all take it, so a request is validated once and hashed once on its way from
    the API to a tier. ``prefix`` and ``extend`` share the key list: the first blocks of a
    prefix or of an extension are the same blocks, with the same keys.
    """

    __slots__ = ("tokens", "namespace", "n_blocks", "buf", "_keys", "_hasher")

    def __init__(
        self, hasher: BlockHasher, arr: np.ndarray, ns: Namespace, keys: list[bytes] | None = None,
        buf: bytes | None = None,
    ) -> None:  # fmt: skip
        self.tokens = arr
        self.namespace = ns
        self.n_blocks = len(arr) // hasher.block_size  # hasher.n_blocks, inlined: once per request
        self.buf = arr.tobytes() if buf is None else buf  # given: arr's bytes, made with it
        self._keys: list[bytes] = [] if keys is None else keys  # append-only, shared with prefixes
        self._hasher = hasher

    def __len__(self) -> int:
        return len(self.tokens)

    def keys(self, n: int | None = None) -> list[bytes]:
        """Keys of the first ``n`` full blocks (all by default), hashing only those not known yet."""
        n = self.n_blocks if n is None else min(n, self.n_blocks)
        keys = self._keys
        have = len(keys)
        if have < n:
            h, ns = self._hasher, self.namespace
            parent = keys[-1] if have else ns.root
            if h._native is not None:  # h._stream, inlined: ~0.3 µs of a ~7 µs one-block store
                keys.extend(h._native.chain(self.buf, h._stride, have, n, parent, ns.secret, h._kind))
            else:
                keys.extend(h._stream(self.buf, ns, parent, have, n))
        return keys[:n]

    def block(self, i: int) -> bytes:
        """Token bytes of full block ``i``."""
        s = self._hasher._stride
        return self.buf[i * s : (i + 1) * s]

    def prefix(self, n_tokens: int) -> Prompt:
        """The first ``n_tokens`` tokens, sharing the keys hashed so far."""
        return Prompt(self._hasher, self.tokens[:n_tokens], self.namespace, self._keys)

    def extend(self, tokens: Tokens) -> Prompt:
        """These tokens followed by ``tokens`` (validated), sharing the keys of the full blocks."""
        more = as_token_array(tokens)
        # A copy cut at this prompt's own blocks: a shared list may hold keys of a longer prompt
        # this one is a prefix of, and past our last full block the extension's blocks differ.
        keys = self._keys[: self.n_blocks]
        return Prompt(self._hasher, np.concatenate([self.tokens, more]), self.namespace, keys)
