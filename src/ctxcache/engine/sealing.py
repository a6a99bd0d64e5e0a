"""Encryption at rest for disk and Redis: AES-256-GCM with one key per tenant.

Each tenant's key is HKDF-SHA256(master key, info = "ctxcache/tenant-key" ‖ tenant id), so the
master key (from a file or the environment, never from config text) is the only secret to keep.
Every blob gets a fresh 96-bit random nonce. The associated data is the block's identity from its
header (key, parent, depth, tenant, token bytes): a block edited in Redis, renamed under another
key, or copied into another tenant's namespace fails authentication and is a miss. RAM tiers are
never sealed (not at rest). Needs ``cryptography`` (``pip install 'ctxcache[crypto]'``).
"""

from __future__ import annotations

import base64
import binascii
import os
import threading
from pathlib import Path
from typing import Any

from ..errors import ConfigError, MissingDependencyError

NONCE = 12


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise MissingDependencyError(
            "encryption at rest needs the 'cryptography' package: pip install 'ctxcache[crypto]'"
        ) from None
    return AESGCM


def load_master_key(file: str | None, env_value: str | None) -> bytes:
    """32+ bytes of key material: a file's raw bytes, or hex / base64 text from the environment."""
    if file:
        try:
            raw = Path(file).expanduser().read_bytes()
        except OSError as exc:
            raise ConfigError(f"tenancy.master_key_file {file!r} cannot be read: {exc}") from None
    elif env_value:
        raw = _decode_text(env_value.strip())
    else:
        raise ConfigError("encryption at rest needs a master key: tenancy.master_key_file or CTXCACHE_MASTER_KEY")
    if len(raw) < 32:
        raise ConfigError(f"the master key must be at least 32 bytes, got {len(raw)}")
    return raw


def _decode_text(text: str) -> bytes:
    try:
        return bytes.fromhex(text)
    except ValueError:
        pass
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("CTXCACHE_MASTER_KEY must be hex or base64 (32 bytes or more)") from None


class TenantSealer:
    """The codec's ``Sealer``: seals and opens blobs with the owning tenant's derived key."""

    def __init__(self, master: bytes) -> None:
        self._aesgcm = _aesgcm()
        self._master = master
        self._keys: dict[bytes, Any] = {}
        self._lock = threading.Lock()

    def _cipher(self, tenant: bytes) -> Any:
        c = self._keys.get(tenant)
        if c is None:
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.kdf.hkdf import HKDF

            key = HKDF(hashes.SHA256(), 32, None, b"ctxcache/tenant-key\0" + tenant).derive(self._master)
            with self._lock:
                c = self._keys.setdefault(tenant, self._aesgcm(key))
        return c

    def seal(self, tenant: bytes, aad: bytes, data: bytes) -> bytes:
        nonce = os.urandom(NONCE)
        return nonce + bytes(self._cipher(tenant).encrypt(nonce, data, aad))

    def open(self, tenant: bytes, aad: bytes, data: Any) -> bytes:
        mv = memoryview(data)  # no copy of the ciphertext: AES-GCM reads the buffer in place
        return bytes(self._cipher(tenant).decrypt(bytes(mv[:NONCE]), mv[NONCE:], aad))
