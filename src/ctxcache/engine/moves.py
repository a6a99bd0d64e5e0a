"""A mover's reads of a block's bytes, lock released, and its hand-overs of reserved bytes between
moves of one key, under the lock (engine/mover.py). ``m`` is a ``mover.Move`` (typed loosely here:
mover.py imports this module)."""

from __future__ import annotations

from typing import Any

from ..tiers import Tier
from ..tiers.base import key_bytes


def vanished(m: Any, src: Tier) -> bool:
    """Lock released: slow tier ``src`` gave no blob for ``m``'s block. Gone (missing, or corrupt:
    the tier deleted it and stopped charging it, as a lookup's read would), or only out of reach
    (down, a Cluster master down: still stored and charged, it stays there)? Asked by a read
    that tells the two apart (``load_many``'s ``unavailable``); on failures only."""
    down: set[int] = set()
    try:
        block = src.load_many([m.key], [None], down)[0]
    except Exception:  # noqa: BLE001 - out of reach: kept
        return False
    return block is None and not down and m.key not in src


def blob_for(m: Any, dst: Tier, src: Tier | None) -> bytes | None:
    """The block encoded with ``dst``'s codec, from the payload or from the source tier."""
    assert dst.codec is not None
    if m.payload is not None:
        return dst.codec.encode(m.payload, key_bytes(m.key), m.meta.tokens, m.meta.parent, m.meta.depth, m.meta.tenant)
    if src is None:
        return None
    if src.codec is not None and src.codec.same_format(dst.codec):
        return src.get_blob(m.key)  # verified by the source, copied as is
    block = src.load_many([m.key], [None])[0]
    if block is None:
        return None
    return dst.codec.encode(block.payload, key_bytes(m.key), block.tokens, block.parent, block.depth, block.tenant)


def behind(mover: Any, m: Any) -> Any:
    """Under the lock: the first move of ``m``'s key into or out of its source queued behind it,
    if it is one that can take over bytes ``m`` counted there (``take_over``): a delete (its
    ``release``) or a write with no old bytes reserved (its ``replaces``); not a move out of
    there to another tier. None else."""
    src = m.src
    if src is None or m.key not in mover.pending:
        return None
    nxt = next((q for q in mover.queue if q.key == m.key and src in (q.src, q.dst)), None)
    if nxt is None or (nxt.dst == src and nxt.replaces) or (nxt.src == src and nxt.dst is not None):
        return None
    return nxt


def take_over(nxt: Any, src: int, nbytes: int) -> None:
    """``nxt`` (from ``behind``) counts ``nbytes`` of tier ``src`` that an earlier move counted: a
    delete frees them when sent, a rewrite replaces them as it lands (or, failing, leaves them)."""
    if nxt.dst == src:
        nxt.replaces = nbytes
    else:
        nxt.release += nbytes
