"""Reuse with compression: retained (compressed) prompt prefixes stored and served by the cache.

A compressed prefix lives under its own namespace, ``<namespace>#retain:<every config field>``,
so its blocks can never be matched by an exact request, nor by one compressed another way: the
namespace is part of every chained block key.

The prompt is compressed at its last block boundary before the final token, then stored block by
block: each block's payload holds the K/V of its kept tokens (possibly none), their original
positions and their policy scores. A later prompt sharing the prefix rebuilds that retained state
from the cache and feeds only the rest. A block's kept tokens are those of the prompt that stored
it (a longer prefix may have evicted more of it); the state rebuilt from a hit is re-trimmed to
the budget at the next boundary, so the budget holds either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from ..usage import Usage
from .retained import RetentionSession
from .retention import RetentionConfig

__all__ = ["CompressedPrefill", "RetentionLM"]


@dataclass
class CompressedPrefill:
    session: RetentionSession  # holds the retained KV; feed it to decode
    logits: torch.Tensor  # last token's logits
    usage: Usage
    namespace: str


def _t(x: Any) -> torch.Tensor:
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.array(x))


class RetentionLM:
    """A CachedLM whose prompts are retained to a budget, with compressed prefixes cached."""

    def __init__(self, lm: Any, config: RetentionConfig) -> None:
        self.lm, self.cfg = lm, config
        RetentionSession(lm.model, config)  # fails now if the policy cannot run on this model

    def namespace(self, base: str = "default") -> str:
        return f"{base}#{self.cfg.tag()}"

    def _payloads(self, s: RetentionSession, first: int, last: int) -> list[dict[str, Any]]:
        bs = self.lm.block_size
        blocks = s.pos // bs
        out = []
        for b in range(first, last):
            sel = torch.nonzero(blocks == b).view(-1)
            p: dict[str, Any] = {}
            for li, layer in enumerate(s.kv.layers):
                p[f"k{li}"] = layer.keys[:, :, sel].clone()
                p[f"v{li}"] = layer.values[:, :, sel].clone()
            pos = s.pos[sel]
            p["pos"], p["received"], p["entropy"] = pos.clone(), s.scores.received[pos], s.scores.entropy[pos]
            out.append(p)
        return out

    def _restore(self, s: RetentionSession, payloads: Sequence[Any], tokens: list[int]) -> None:
        n_layers = (len(payloads[0]) - 3) // 2
        kv = DynamicCache()
        for li in range(n_layers):
            kv.update(torch.cat([_t(p[f"k{li}"]) for p in payloads], -2),
                      torch.cat([_t(p[f"v{li}"]) for p in payloads], -2), li)  # fmt: skip
        pos = torch.cat([_t(p["pos"]) for p in payloads]).to(torch.int64)
        s.kv, s.pos, s.tokens = kv, pos, list(tokens)
        sc = s.scores
        sc.grow(len(tokens), torch.zeros(len(tokens), dtype=torch.int64))
        sc.received[pos] = torch.cat([_t(p["received"]) for p in payloads]).to(torch.float64)
        sc.entropy[pos] = torch.cat([_t(p["entropy"]) for p in payloads]).to(torch.float64)

    def prefill(
        self, tokens: Sequence[int], *, namespace: str = "default", use_cache: bool = True
    ) -> CompressedPrefill:
        lm, bs = self.lm, self.lm.block_size
        ids = lm._check_tokens(tokens)
        ns = self.namespace(namespace)
        s = RetentionSession(lm.model, self.cfg, chunk=lm.prefill_chunk)
        m = lm.cache.lookup(ids[:-1], ns) if use_cache else None
        created = 0
        try:
            start = m.hit_tokens if m else 0
            if m and m.n_blocks:
                self._restore(s, m.payloads, ids[:start])
            cut = (len(ids) - 1) // bs * bs  # the last boundary before the final token
            if cut > start:
                s.feed(ids[start:cut])
                s.compress()
                if use_cache:
                    stored = lm.cache.store(ids[:cut], self._payloads(s, start // bs, cut // bs), ns, start // bs)
                    created = stored.cache_creation_tokens
            logits = s.feed(ids[max(cut, start) :])
            s.compress()
        finally:
            if m is not None:
                lm.cache.release(m)
        hit = m.hit_tokens if m else 0
        usage = Usage(cache_read_tokens=hit, cache_creation_tokens=created, uncached_tokens=len(ids) - hit,
                      by_tier=dict(m.usage.by_tier) if m else {})  # fmt: skip
        return CompressedPrefill(s, logits[-1], usage, ns)
