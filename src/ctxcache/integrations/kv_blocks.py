"""The layout of a KV block payload: cut out of a model's per-layer cache, joined back into one.

A payload is every layer's ``(K, V)`` for one block's tokens (see integrations/transformers.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["block_payload", "join_blocks"]


def join_blocks(parts: list[Any]) -> Any:
    """Join blocks along the token axis into a new tensor, so decoding never writes to stored blocks.

    Memory tiers hand back the stored torch tensors; serializing tiers hand back numpy views of
    their blobs (read-only), which are joined in numpy and then wrapped without another copy.
    """
    if all(isinstance(p, torch.Tensor) for p in parts):
        return torch.cat(parts, -2)
    return torch.from_numpy(np.concatenate([np.asarray(p) for p in parts], axis=-2))


def block_payload(layers: list[tuple[Any, Any]], lo: int, hi: int) -> list[tuple[Any, Any]]:
    """Tokens ``lo:hi`` of every layer's K and V, copied into one buffer of exactly their size.

    One allocation per block instead of one per tensor (36 for Gemma 3 270M): a block above
    glibc's mmap threshold (server/memory.py; 1.2 MB at block size 32) is its own mapping, which an
    eviction hands back to the OS whole, where 36 small chunks left holes in the heap between
    long-lived blocks. The views tile the buffer, so the payload's measured size is the buffer's.
    """
    parts = [t[:, :, lo:hi] for kv in layers for t in kv]
    if len({p.dtype for p in parts}) != 1:
        return [(k[:, :, lo:hi].clone(), v[:, :, lo:hi].clone()) for k, v in layers]
    flat = torch.empty(sum(p.numel() for p in parts), dtype=parts[0].dtype)
    views, off = [], 0
    for p in parts:
        view = flat[off : off + p.numel()].view(p.shape)
        view.copy_(p)
        views.append(view)
        off += p.numel()
    return list(zip(views[0::2], views[1::2], strict=True))
