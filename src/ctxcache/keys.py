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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import blake3
import numpy as np
import xxhash

from .errors import ConfigError, InvalidTokensError, TokenTypeError

FORMAT_VERSION = 1
KEY_BYTES = 16
HashName = Literal["xxh3", "blake3"]
HASHES: tuple[str, ...] = ("xxh3", "blake3")
Tokens = Sequence[int] | np.ndarray
_INT32_MAX = 2**31 - 1


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

    @property
    def root(self) -> bytes:
        """The parent key of block 0."""
        return self.secret[:KEY_BYTES]


def as_token_array(tokens: Tokens) -> np.ndarray:
    """Validate tokens and return them as a contiguous int32 array (no copy when already so)."""
    if isinstance(tokens, np.ndarray):
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
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidTokensError(f"token ids must be integers, got dtype {arr.dtype}")
    if arr.size and arr.dtype != np.int32:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0:
            raise InvalidTokensError(f"token ids must be non-negative; found {lo}")
        if hi > _INT32_MAX:
            raise InvalidTokensError(f"token ids must fit in int32; found {hi}")
    elif arr.size and int(arr.min()) < 0:
        raise InvalidTokensError(f"token ids must be non-negative; found {int(arr.min())}")
    return np.ascontiguousarray(arr, dtype="<i4")


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class BlockHasher:
    """Cuts token arrays into blocks and computes their chained keys."""

    def __init__(self, block_size: int = 256, hash: str = "xxh3") -> None:
        if not isinstance(block_size, int) or block_size < 1:
            raise ConfigError(f"block_size must be a positive int, got {block_size!r}")
        if hash not in HASHES:
            raise ConfigError(f"unknown hash {hash!r}; known: {', '.join(HASHES)}")
        self.block_size = block_size
        self.hash = hash
        self._stride = block_size * 4

    def n_blocks(self, n_tokens: int) -> int:
        """Full blocks in ``n_tokens``: the trailing partial block is never cached."""
        return n_tokens // self.block_size

    def block_bytes(self, arr: np.ndarray) -> list[bytes]:
        """The int32 bytes of each full block of a validated array."""
        buf = arr.tobytes()
        s = self._stride
        return [buf[i * s : (i + 1) * s] for i in range(len(arr) // self.block_size)]

    def iter_keys(self, blocks: Sequence[bytes], ns: Namespace, start: int = 0) -> Iterator[bytes]:
        """Yield the key of each block in order. Lazy, so a cold lookup hashes one block only.

        ``start`` skips the first blocks' yields but still chains through them.
        """
        parent = ns.root
        if self.hash == "xxh3":
            seed = int.from_bytes(ns.secret[16:24], "little")
            digest = xxhash.xxh3_128_digest
            for i, data in enumerate(blocks):
                parent = digest(parent + data, seed)
                if i >= start:
                    yield parent
        else:
            template = blake3.blake3(key=ns.secret)
            for i, data in enumerate(blocks):
                h = template.copy()
                h.update(parent)
                h.update(data)
                parent = h.digest(KEY_BYTES)
                if i >= start:
                    yield parent

    def keys(self, tokens: Tokens, ns: Namespace) -> list[bytes]:
        """All full-block keys of ``tokens`` under ``ns``."""
        return list(self.iter_keys(self.block_bytes(as_token_array(tokens)), ns))
