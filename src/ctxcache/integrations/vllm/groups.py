"""Hybrid KV-cache groups (vLLM's ``SupportsHMA``): per-group blocks, sliding windows stored sparsely.

With the hybrid KV cache manager on, vLLM splits a model's attention layers into KV-cache groups
of equal size, each with its own block table (Gemma 3 270M: 18 layers in 6 groups of 3, one
full-attention group and five sliding-window groups, window 512). The groups share one block
pool, so a block id names one group's block; a sliding-window group's table holds the null block
(id 0, vLLM's ``BlockPool.null_block``) for blocks that fell out of the window.

What we store per ctxcache block (one key per block, the same chain as today): a payload with
one entry per layer, group by group. A full-attention group's layers are always there. A
sliding-window group's layers are there only where a later request can need them, else an empty
tensor stands in for each layer (a few bytes). A request that resumes at token H needs each
sliding-window group's last ``need`` blocks before H (``need`` = ceil((window - 1) / block)), so
its layers are kept for:

- the ``need`` blocks before each segment boundary (every ``segment`` tokens: a prefix shared by
  different prompts, like one document with different questions, is reused up to the last
  boundary it covers);
- the ``need`` blocks before the stored prompt's own resume point ((prompt length - 1) rounded
  down to a block: the same prompt again reuses everything) and every block after it
  (generated tokens: the next chat turn starts there).

A block whose group id is the null block (vLLM already dropped it) is never read: its layers are
stored empty. All groups of a block are one stored object, so a block is never present for one
group and absent for another; the all-groups rule is about the window: a cached prefix of H tokens
is a hit only if every sliding-window group has its ``need`` blocks before H
(:meth:`HybridLayout.usable_tokens`); otherwise the hit is cut back to the longest H that does,
never a load with a group's KV missing. The namespace names the groups (``|hma:g0=sw512x3,...``):
blocks stored with hybrid management off (every layer in every block) never answer a hybrid
engine's lookup and back.

Loads: for each vLLM block and group, the group's layers go into the group's block id; null ids
(vLLM does not need that block for that group) are skipped.

This module imports neither vLLM nor the connector: the unit tests build it from plain objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...errors import ConfigError
from .kv import KVLayout

NULL_BLOCK = 0  # vLLM's BlockPool.null_block: the first block of the pool, never a request's KV
DEFAULT_SEGMENT = 1024  # tokens between the reuse points of sliding-window groups (extra config "hma_segment")


@dataclass(frozen=True)
class Group:
    index: int
    layer_names: tuple[str, ...]
    window: int | None  # tokens a sliding-window layer attends to (None: full attention)

    @property
    def kind(self) -> str:
        return "full" if self.window is None else f"sw{self.window}"


def groups_of(kv_cache_config: Any, vllm_block: int) -> list[Group]:
    """vLLM's KV-cache groups as :class:`Group` s; what the connector cannot handle is refused."""
    out = []
    for i, g in enumerate(getattr(kv_cache_config, "kv_cache_groups", None) or []):
        spec = g.kv_cache_spec
        name = type(spec).__name__
        if int(getattr(spec, "block_size", vllm_block)) != vllm_block:
            raise ConfigError(
                f"KV-cache group {i} ({name}) has block size {spec.block_size}, not vLLM's {vllm_block}: "
                "the ctxcache connector needs one block size for all groups"
            )
        if name == "SlidingWindowSpec":
            window = int(spec.sliding_window) + int(getattr(spec, "extra_retained_tokens", 0) or 0)
        elif name == "FullAttentionSpec":
            window = None
        else:
            raise ConfigError(
                f"KV-cache group {i} is {name}: the ctxcache connector handles full-attention and "
                "sliding-window groups only; run with --disable-hybrid-kv-cache-manager"
            )
        out.append(Group(i, tuple(g.layer_names), window))
    return out


def group_tag(groups: Sequence[Group]) -> str:
    """The namespace suffix of a hybrid layout (empty for one group: the namespace is unchanged)."""
    if len(groups) <= 1:
        return ""
    return "|hma:" + ",".join(f"g{g.index}={g.kind}x{len(g.layer_names)}" for g in groups)


def zip_groups(per_group: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """vLLM's per-group block-id lists as one tuple per block position (what the planner slices).
    Lists of different lengths (not seen with one block size) are padded with the null block."""
    n = max((len(ids) for ids in per_group), default=0)
    return [tuple(ids[i] if i < len(ids) else NULL_BLOCK for ids in per_group) for i in range(n)]


def _empty(x: Any) -> bool:
    return x is None or (hasattr(x, "shape") and int(np.prod(x.shape)) == 0)


class HybridLayout:
    """One :class:`KVLayout` per group, with the window rule; the worker's ``layout`` in hybrid mode."""

    def __init__(
        self,
        kv_caches: dict[str, torch.Tensor],
        groups: Sequence[Group],
        num_blocks: int,
        vllm_block: int,
        cc_block: int,
        segment: int = DEFAULT_SEGMENT,
    ) -> None:
        missing = [n for g in groups for n in g.layer_names if n not in kv_caches]
        if missing:
            raise ConfigError(f"vLLM registered no KV tensor for layers {missing[:4]} of its KV-cache groups")
        if segment < 0 or segment % cc_block:
            raise ConfigError(f"hma_segment {segment} must be a non-negative multiple of the block size {cc_block}")
        self.groups = list(groups)
        self.parts = [KVLayout({n: kv_caches[n] for n in g.layer_names}, num_blocks, vllm_block) for g in groups]
        self.offsets = []
        off = 0
        for p in self.parts:
            self.offsets.append(off)
            off += len(p.layers)
        self.layers = [t for p in self.parts for t in p.layers]
        self.cc_block, self.vllm_block = cc_block, vllm_block
        self.segment = segment // cc_block  # in ctxcache blocks; 0: no segment boundaries
        # ctxcache blocks a sliding-window group needs before a resume point (None: full attention)
        self.need = [None if g.window is None else -(-(g.window - 1) // cc_block) for g in groups]

    def fingerprint(self) -> str:
        return group_tag(self.groups) + "|" + ";".join(p.fingerprint() for p in self.parts)

    # --- the window rule ------------------------------------------------------------------------
    def keep(self, gi: int, block: int, prompt_len: int) -> bool:
        """Whether group ``gi``'s layers of ctxcache block ``block`` are stored."""
        need = self.need[gi]
        if need is None:
            return True
        resume = max(0, prompt_len - 1) // self.cc_block  # the same prompt again resumes here (blocks)
        if block >= resume - need:
            return True
        s = self.segment
        return s > 0 and (need >= s or block % s >= s - need)

    def usable_blocks(self, payloads: Sequence[Any], n: int) -> int:
        """The longest prefix (in ctxcache blocks, <= n) whose resume point has every
        sliding-window group's ``need`` blocks stored."""
        sliding = [(self.offsets[i], need) for i, need in enumerate(self.need) if need is not None]
        for h in range(n, 0, -1):
            if all(
                _present(payloads[b], off) for off, need in sliding for b in range(max(0, h - need), h)
            ):  # fmt: skip
                return h
        return 0

    def usable_tokens(self, match: Any) -> int:
        """The Stash's hit rule: a lookup's hit, cut back to where every group has what it needs."""
        return self.usable_blocks(match.payloads, match.n_blocks) * self.cc_block

    # --- out of vLLM ----------------------------------------------------------------------------
    def gather(
        self, block_ids: Sequence[Any], ratio: int, first_block: int = 0, prompt_len: int = 0
    ) -> list[list[torch.Tensor]]:
        """Payloads of whole ctxcache blocks from ``first_block`` on: ``[block][layer]``, every
        group's layers (empty where not kept). Stops before a block whose full-attention ids
        include the null block (nothing there to store)."""
        n = len(block_ids) // ratio
        for b in range(n):
            pos = block_ids[b * ratio : (b + 1) * ratio]
            if any(x[gi] == NULL_BLOCK for x in pos for gi, need in enumerate(self.need) if need is None):
                n = b
                break
        out: list[list[torch.Tensor]] = [[] for _ in range(n)]
        for gi, part in enumerate(self.parts):
            kept = []
            for b in range(n):
                mine = [x[gi] for x in block_ids[b * ratio : (b + 1) * ratio]]
                if self.keep(gi, first_block + b, prompt_len) and NULL_BLOCK not in mine:
                    kept.append(b)
            got = part.gather([x[gi] for b in kept for x in block_ids[b * ratio : (b + 1) * ratio]], ratio)
            by_block = dict(zip(kept, got))
            for b in range(n):
                if b in by_block:
                    out[b].extend(by_block[b])
                else:
                    out[b].extend(torch.empty(0, dtype=t.dtype) for t in part.layers)
        return out

    # --- into vLLM ------------------------------------------------------------------------------
    def check(self, payload: Any, ratio: int) -> list[Any] | None:
        """The payload's per-layer tensors (None for a group's layers stored empty) if it fits."""
        if not isinstance(payload, (list, tuple)) or len(payload) != len(self.layers):
            return None
        out: list[Any] = []
        for part, off in zip(self.parts, self.offsets):
            mine = payload[off : off + len(part.layers)]
            if all(_empty(x) for x in mine):
                out.extend([None] * len(mine))
                continue
            checked = part.check(list(mine), ratio)
            if checked is None:
                return None
            out.extend(checked)
        return out

    def scatter(self, block_ids: Sequence[Any], parts: Sequence[tuple[list[Any], int]]) -> set[int]:
        """Write each group's layers into its block ids (null ids skipped). Returns the block ids
        vLLM needs that the payload does not hold (empty for that group): load errors."""
        bad: set[int] = set()
        for gi, (part, off) in enumerate(zip(self.parts, self.offsets)):
            ids, sub = [], []
            for x, (payload, s) in zip(block_ids, parts):
                bid = x[gi]
                if bid == NULL_BLOCK:
                    continue
                mine = payload[off : off + len(part.layers)]
                if any(p is None for p in mine):
                    bad.add(bid)
                    continue
                ids.append(bid)
                sub.append((list(mine), s))
            part.scatter(ids, sub)
        return bad


def _present(payload: Any, off: int) -> bool:
    return isinstance(payload, (list, tuple)) and len(payload) > off and not _empty(payload[off])


def flat_ids(ids: Any) -> list[int]:
    """Block ids of one position (an int, or a tuple per group), nulls left out."""
    return [ids] if isinstance(ids, int) else [x for x in ids if x != NULL_BLOCK]
