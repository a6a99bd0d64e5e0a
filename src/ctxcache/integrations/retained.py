"""A retained KV cache: a transformers DynamicCache that holds only the kept tokens.

Positions stay correct after tokens are dropped. transformers 5.x derives a new token's position
from the cache length and builds the causal / sliding-window masks from cache indices, so once a
cache has holes both would be wrong (a naive continuation of a 1000-token context kept at 500
tokens would run at position 500 and slide its 512-token window over 1000 positions). Every
forward here passes explicit position ids, and, once anything was dropped, one explicit additive
mask per layer type built from the kept tokens' original positions: a query at position q sees a
key at position p iff p <= q (and q - p < window on sliding layers). So dropping a token is
exactly masking it out; nothing else changes, and with nothing dropped the forward is the plain
one, bit for bit.

Attention weights (for the scored policies) come from eager attention with ``output_attentions``;
an sdpa model is refused rather than silently switched (what eager costs: docs/retention.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from .retention import RetentionConfig, RetentionConfigError, Scores, select

__all__ = ["Evicted", "RetentionSession", "attention_impl"]


def attention_impl(model: Any) -> str:
    return str(getattr(model.config, "_attn_implementation", None) or "sdpa")


@dataclass
class Evicted:
    """What one ``compress`` dropped: original positions and every layer's (K, V) for them."""

    positions: torch.Tensor
    layers: list[tuple[torch.Tensor, torch.Tensor]]


class RetentionSession:
    """One sequence fed through a model whose KV is trimmed to a budget by a retention policy.

    ``feed`` runs tokens (in chunks) and returns their last logits; ``compress`` trims the KV to
    the budget (of every token fed so far) and returns what it dropped (to a warm store, if any).
    """

    def __init__(self, model: Any, config: RetentionConfig, *, chunk: int = 512, warm: Any = None) -> None:
        if not isinstance(config, RetentionConfig):
            raise TypeError(f"config must be a RetentionConfig, not {type(config).__name__}")
        if config.needs_scores and attention_impl(model) != "eager":
            raise RetentionConfigError(
                f"retention policy {config.policy!r} needs attention weights, which only eager attention "
                f"returns; this model runs {attention_impl(model)!r}. Load it with "
                "attn_implementation='eager' (or call model.set_attn_implementation('eager')), or use "
                "policy 'streaming'"
            )
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self.model, self.cfg, self.chunk, self.warm = model, config, chunk, warm
        c = model.config
        self.layer_types: list[str] = list(getattr(c, "layer_types", None) or ["full_attention"] * c.num_hidden_layers)
        self.window = int(getattr(c, "sliding_window", None) or 0)
        self.kv: Any = DynamicCache()  # no config: sliding layers keep every token (see transformers.py)
        self.pos = torch.zeros(0, dtype=torch.int64)  # original positions of the kept tokens, ascending
        self.tokens: list[int] = []
        self.scores = Scores.empty()
        self.turn = 0
        self.dropped = 0
        self.last_logits: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return len(self.tokens)

    @property
    def kept(self) -> int:
        return len(self.pos)

    # --- forward ------------------------------------------------------------------------------------
    def allowed(self, qpos: torch.Tensor, kpos: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per layer type, a [Q, K] bool matrix: may query i attend to key j (by original positions)."""
        causal = kpos[None, :] <= qpos[:, None]
        out = {}
        for lt in set(self.layer_types):
            sliding = lt == "sliding_attention" and self.window > 0
            out[lt] = causal & (qpos[:, None] - kpos[None, :] < self.window) if sliding else causal
        return out

    def _masks(self, allowed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        dtype = self.model.dtype
        low = torch.finfo(dtype).min
        zero = torch.zeros((), dtype=dtype)
        return {lt: torch.where(a, zero, low)[None, None] for lt, a in allowed.items()}

    @torch.no_grad()
    def feed(self, ids: Sequence[int], *, keep_logits: int = 1, new_turn: bool = False) -> torch.Tensor:
        """Run ``ids`` after everything fed so far; the logits of the last ``keep_logits`` of them."""
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError("feed needs at least one token")
        if new_turn:
            self.turn += 1
        keep = max(1, min(keep_logits, len(ids)))
        obs_from = self.length + len(ids) - self.cfg.window  # SnapKV's observation window
        if self.cfg.needs_scores:
            self.scores.recent.zero_()
        parts = []
        for s in range(0, len(ids), self.chunk):
            piece = ids[s : s + self.chunk]
            want = max(0, keep - (len(ids) - s - len(piece)))  # logits this piece contributes
            logits = self._step(piece, max(1, min(want, len(piece))), obs_from)
            if want:
                parts.append(logits[-want:])
        out = torch.cat(parts)[-keep:]
        self.last_logits = out[-1]
        return out

    def _step(self, ids: list[int], keep: int, obs_from: int) -> torch.Tensor:
        qpos = torch.arange(self.length, self.length + len(ids))
        kpos = torch.cat([self.pos, qpos])
        need = self.cfg.needs_scores
        allowed = self.allowed(qpos, kpos) if need or self.kept != self.length else None
        masks = self._masks(allowed) if allowed is not None and self.kept != self.length else None
        out = self.model(
            input_ids=torch.tensor([ids]), cache=self.kv, position_ids=qpos[None], attention_mask=masks,
            use_cache=True, logits_to_keep=keep, output_attentions=need,
        )  # fmt: skip
        self.pos = kpos
        self.tokens.extend(ids)
        self.scores.grow(self.length, torch.full((len(ids),), self.turn, dtype=torch.int64))
        if need:
            assert allowed is not None
            self._score(out.attentions, qpos, kpos, allowed, obs_from)
        logits: torch.Tensor = out.logits[0]
        return logits

    def _score(
        self, attns: Sequence[torch.Tensor], qpos: torch.Tensor, kpos: torch.Tensor,
        allowed: dict[str, torch.Tensor], obs_from: int,
    ) -> None:  # fmt: skip
        sc = self.scores
        obs = qpos >= obs_from
        ent = torch.zeros(len(qpos), dtype=torch.float64)
        for lt, a in zip(self.layer_types, attns):
            w = a[0].to(torch.float64)  # [heads, Q, K]
            sc.received.index_add_(0, kpos, w.sum((0, 1)))
            if obs.any():
                sc.recent.index_add_(0, kpos, w[:, obs].sum((0, 1)))
            n = allowed[lt].sum(-1).to(torch.float64)
            h = torch.special.entr(w).sum(-1).mean(0)  # [Q]
            ent += torch.where(n > 1, h / torch.log(n.clamp_min(2)), torch.zeros_like(h))
        sc.entropy[qpos] = ent / len(attns)

    # --- retention ----------------------------------------------------------------------------------
    def compress(self) -> Evicted | None:
        """Trim the kept tokens to the budget of ``length``; returns what was dropped, if anything."""
        n_keep = self.cfg.keep_count(self.length)
        if n_keep >= self.kept:
            return None
        if self.cfg.policy == "entropy" and not self.turn:
            self.scores.turn = torch.arange(self.length) // self.cfg.turn_tokens
        idx = select(self.cfg, self.scores, self.pos, n_keep)
        gone = torch.ones(self.kept, dtype=torch.bool)
        gone[idx] = False
        drop = torch.nonzero(gone).view(-1)
        layers = [(layer.keys, layer.values) for layer in self.kv.layers]
        ev = Evicted(self.pos[drop], [(k[:, :, drop], v[:, :, drop]) for k, v in layers])
        self._set(self.pos[idx], [(k[:, :, idx], v[:, :, idx]) for k, v in layers])
        self.dropped += len(drop)
        if self.warm is not None:
            self.warm.put(self.tokens, ev)
        return ev

    def _set(self, pos: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        kv = DynamicCache()
        for li, (k, v) in enumerate(layers):
            kv.update(k.contiguous(), v.contiguous(), li)
        self.kv, self.pos = kv, pos

    def insert(self, pos: torch.Tensor, layers: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Put tokens back (a warm-store recall), in position order."""
        allpos = torch.cat([self.pos, pos])
        order = torch.argsort(allpos)
        cur = [(layer.keys, layer.values) for layer in self.kv.layers]
        merged = [(torch.cat([k, k2], -2)[:, :, order], torch.cat([v, v2], -2)[:, :, order])
                  for (k, v), (k2, v2) in zip(cur, layers)]  # fmt: skip
        self._set(allpos[order], merged)

    def truncate(self, n: int) -> None:
        """Forget the last ``n`` fed tokens (they must all still be kept): re-run a chunk after a recall."""
        if n <= 0:
            return
        if n > self.kept or int(self.pos[-n]) != self.length - n:
            raise ValueError("only tokens fed since the last compress can be taken back")
        self._set(self.pos[:-n], [(layer.keys[:, :, :-n], layer.values[:, :, :-n]) for layer in self.kv.layers])
        del self.tokens[-n:]
        sc = self.scores
        sc.received, sc.recent, sc.entropy, sc.turn = (sc.received[:-n], sc.recent[:-n], sc.entropy[:-n], sc.turn[:-n])

    def fork(self, config: RetentionConfig, warm: Any = None) -> RetentionSession:
        """A copy of this session's state under another config (scores carry over): one scored
        prefill serves many policies and budgets."""
        f = RetentionSession(self.model, config, chunk=self.chunk, warm=warm)
        f._set(self.pos.clone(), [(layer.keys.clone(), layer.values.clone()) for layer in self.kv.layers])
        f.tokens, f.turn, f.dropped, f.last_logits = list(self.tokens), self.turn, self.dropped, self.last_logits
        sc = self.scores
        f.scores = Scores(sc.received.clone(), sc.recent.clone(), sc.entropy.clone(), sc.turn.clone())
        return f

    def kv_bytes(self) -> int:
        return sum(layer.keys.nbytes + layer.values.nbytes for layer in self.kv.layers)


def nll(session: RetentionSession, ids: Sequence[int], step: int = 128, compress: bool = True) -> tuple[float, int]:
    """Summed negative log-likelihood of ``ids`` right after what the session was fed (at least one
    token), fed ``step`` tokens at a time and compressed to the budget after each step (so every
    step sees the retained context): returns (sum, count)."""
    if session.last_logits is None:
        raise ValueError("feed the session a context (at least one token) first")
    total, count = 0.0, 0
    for s in range(0, len(ids), step):
        piece = [int(t) for t in ids[s : s + step]]
        prev = session.last_logits
        logits = session.feed(piece, keep_logits=len(piece))
        pred = torch.cat([prev[None], logits[:-1]]).to(torch.float64)
        logp = torch.log_softmax(pred, -1)
        total -= float(logp[torch.arange(len(piece)), torch.tensor(piece)].sum())
        count += len(piece)
        if compress:
            session.compress()
    return total, count
