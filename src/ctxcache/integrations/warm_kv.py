"""The warm store: evicted tokens' K/V in a ctxcache tier, recalled when a later query needs them.

Each ``compress`` hands its evicted tokens here, grouped by cache block: one entry per (block key,
token offsets), the block key being a hash of the namespace and the token prefix up to the end of
that block (what a chained block key identifies). The K/V go to a tier (by default a warm memory
tier through the block codec, so they can also be stored quantized); RAM keeps only a cheap
summary per entry, as Quest does: the per-channel min and max of its keys on every full-attention
layer. For a new query q the largest logit any key of the entry can reach is bounded by
sum_d max(q_d min_d, q_d max_d), so the entries with the highest bounds are the ones worth loading.

``recall_feed`` runs a chunk once while capturing its queries, picks the top entries by bound,
and if any, takes the chunk back, inserts their K/V at their original positions and runs the
chunk again (the second pass is the cost of a recall). With ``measure`` it also computes, from
the real keys, which entries the chunk actually needed: an entry whose tokens would have taken at
least ``tau`` of some head's attention on some full-attention layer.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import xxhash

from ..errors import TierUnavailableError
from ..tiers.memory import MemoryTier
from .retained import Evicted, RetentionSession

__all__ = ["QueryCapture", "RecallStats", "WarmStore", "recall_feed"]


@dataclass
class _Entry:
    positions: torch.Tensor
    summary: dict[int, tuple[torch.Tensor, torch.Tensor]]  # full layer -> (kmin, kmax) [kv_heads, D]


@dataclass
class RecallStats:
    entries: int = 0  # warm entries when the chunk arrived
    recalled: list[bytes] = field(default_factory=list)
    needed: list[bytes] = field(default_factory=list)  # only with measure=True
    recalled_tokens: int = 0


def _tensor(x: Any) -> torch.Tensor:
    """A tensor we own: tiers may hand back stored tensors or read-only numpy views of a blob."""
    return x.clone() if isinstance(x, torch.Tensor) else torch.from_numpy(np.array(x))


class WarmStore:
    def __init__(
        self,
        full_layers: Sequence[int],
        *,
        tier: Any = None,
        block_size: int = 64,
        namespace: str = "default",
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.tier = tier if tier is not None else MemoryTier(1 << 34, mode="warm", codec="raw")
        self.full_layers = list(full_layers)
        self.block_size = block_size
        self.ns = namespace.encode()
        self.entries: dict[bytes, _Entry] = {}
        self.puts = self.recalls = 0
        self.orphaned = 0  # taken entries whose delete from the tier failed

    def key(self, tokens: Sequence[int], block: int, offsets: np.ndarray) -> bytes:
        end = min(len(tokens), (block + 1) * self.block_size)
        h = xxhash.xxh3_128(self.ns + b"\0")
        h.update(np.asarray(tokens[:end], dtype=np.int64).tobytes())
        h.update(offsets.astype(np.int64).tobytes())
        return h.digest()

    def put(self, tokens: Sequence[int], ev: Evicted) -> list[bytes]:
        keys = []
        blocks = ev.positions // self.block_size
        for b in torch.unique(blocks).tolist():
            sel = torch.nonzero(blocks == b).view(-1)
            pos = ev.positions[sel]
            payload: dict[str, Any] = {}
            for li, (k, v) in enumerate(ev.layers):
                payload[f"k{li}"], payload[f"v{li}"] = k[:, :, sel].contiguous(), v[:, :, sel].contiguous()
            payload["pos"] = pos.numpy()  # last: k16v8 tells keys from values by even/odd position
            key = self.key(tokens, b, (pos - b * self.block_size).numpy())
            self.tier.put(key, payload)
            summary = {}
            for li in self.full_layers:
                k = payload[f"k{li}"][0]  # [kv_heads, n, D]
                summary[li] = (k.amin(1), k.amax(1))
            self.entries[key] = _Entry(pos, summary)
            keys.append(key)
        self.puts += len(keys)
        return keys

    def get(self, key: bytes) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        p = self.tier.get(key)
        if p is None:
            raise KeyError(key.hex())
        n_layers = (len(p) - 1) // 2
        layers = [(_tensor(p[f"k{i}"]), _tensor(p[f"v{i}"])) for i in range(n_layers)]
        return _tensor(p["pos"]), layers

    def take(self, key: bytes) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        out = self.get(key)
        try:
            self.tier.delete(key)
        except TierUnavailableError:
            # The KV is read; a delete a remote tier could not confirm leaves a copy that nothing
            # refers to any more (its TTL or a flush reclaims it), not a lost recall.
            self.orphaned += 1
        del self.entries[key]
        self.recalls += 1
        return out

    def bounds(self, queries: dict[int, torch.Tensor]) -> dict[bytes, float]:
        """Per entry, the largest logit any of its keys can reach for any captured query."""
        out = {}
        for key, e in self.entries.items():
            best = -float("inf")
            for li, q in queries.items():  # q: [heads, Q, D], already scaled
                kmin, kmax = e.summary[li]
                g = q.shape[0] // kmin.shape[0]
                lo, hi = kmin.repeat_interleave(g, 0)[:, None], kmax.repeat_interleave(g, 0)[:, None]
                best = max(best, float(torch.maximum(q * lo, q * hi).sum(-1).max()))
            out[key] = best
        return out


class QueryCapture:
    """Captures the (rotated, scaled) queries of the given attention layers during a forward."""

    def __init__(self, model: Any, layers: Sequence[int]) -> None:
        self.model, self.layers = model, list(layers)
        self.q: dict[int, torch.Tensor] = {}
        self._hooks: list[Any] = []

    def __enter__(self) -> QueryCapture:
        for li in self.layers:
            attn = self.model.model.layers[li].self_attn
            self._hooks.append(attn.register_forward_pre_hook(self._hook(li, attn), with_kwargs=True))
        return self

    def _hook(self, li: int, attn: Any) -> Any:
        rotate = sys.modules[type(attn).__module__].apply_rotary_pos_emb

        def pre(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hs = args[0] if args else kwargs["hidden_states"]
            q = attn.q_proj(hs).view(*hs.shape[:-1], -1, attn.head_dim).transpose(1, 2)
            if getattr(attn, "q_norm", None) is not None:
                q = attn.q_norm(q)
            cos, sin = kwargs["position_embeddings"]
            q, _ = rotate(q, q, cos, sin)
            self.q[li] = (q[0] * attn.scaling).detach()

        return pre

    def __exit__(self, *exc: object) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks.clear()


def _needed(
    s: RetentionSession, warm: WarmStore, q: dict[int, torch.Tensor], qpos: torch.Tensor, tau: float
) -> list[bytes]:
    """Entries that would take >= tau of some head's attention on some full layer (from real keys)."""
    loaded = {key: warm.get(key) for key in warm.entries}
    need: set[bytes] = set()
    for li, qq in q.items():
        kept = s.kv.layers[li].keys[0]  # [kv_heads, K, D]
        g = qq.shape[0] // kept.shape[0]
        vis = s.pos[None, :] <= qpos[:, None]  # [Q, K]
        lk = torch.einsum("hqd,hkd->hqk", qq, kept.repeat_interleave(g, 0)).masked_fill(~vis, -float("inf"))
        parts = {key: torch.einsum("hqd,hkd->hqk", qq, layers[li][0][0].repeat_interleave(g, 0))
                 for key, (_, layers) in loaded.items()}  # fmt: skip
        denom = torch.logsumexp(torch.cat([lk, *parts.values()], -1), -1)  # [H, Q]
        for key, lg in parts.items():
            if float((torch.logsumexp(lg, -1) - denom).exp().max()) >= tau:
                need.add(key)
    return sorted(need)


def recall_feed(
    s: RetentionSession, ids: Sequence[int], *, top_k: int = 4, keep_logits: int = 1,
    measure: bool = False, tau: float = 0.05,
) -> tuple[torch.Tensor, RecallStats]:  # fmt: skip
    """Feed ``ids`` (one chunk), recalling the ``top_k`` warm entries its queries bound highest."""
    warm = s.warm
    if warm is None:
        raise ValueError("this session has no warm store")
    if len(ids) > s.chunk:
        raise ValueError(f"recall_feed takes one chunk (<= {s.chunk} tokens), got {len(ids)}")
    st = RecallStats(entries=len(warm.entries))
    qpos = torch.arange(s.length, s.length + len(ids))
    sc = s.scores
    saved = (sc.received.clone(), sc.recent.clone(), sc.entropy.clone(), sc.turn.clone(), s.last_logits)
    with QueryCapture(s.model, warm.full_layers) as cap:
        logits = s.feed(ids, keep_logits=keep_logits)
    if not warm.entries or top_k <= 0:
        return logits, st
    if measure:
        st.needed = _needed(s, warm, cap.q, qpos, tau)
    b = warm.bounds(cap.q)
    st.recalled = sorted(b, key=lambda k: b[k], reverse=True)[:top_k]
    s.truncate(len(ids))
    sc.received, sc.recent, sc.entropy, sc.turn, s.last_logits = saved  # the first pass never happened
    for key in st.recalled:
        pos, layers = warm.take(key)
        st.recalled_tokens += len(pos)
        s.insert(pos, [(k.to(s.model.dtype), v.to(s.model.dtype)) for k, v in layers])
    return s.feed(ids, keep_logits=keep_logits), st
