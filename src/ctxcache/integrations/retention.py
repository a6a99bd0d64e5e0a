"""Token-level KV retention: which tokens of a context stay in the K/V the model attends to.

A policy ranks the tokens currently kept; ``select`` keeps the ``budget`` best (always the first
``sinks`` tokens and, as far as the budget allows, the last ``recent`` ones). Dropping a token is
exactly masking it out of every later query's attention: the kept tokens keep their original
positions (see ``retained.py``), so nothing else changes.

Policies (one selection is shared by every layer, so one position list describes the cache):

``full``       keep everything (the reference; budget must be 100 %).
``streaming``  StreamingLLM: attention sinks + the most recent tokens.
``h2o``        H2O heavy hitters: attention received, accumulated over every query so far.
``snapkv``     SnapKV: attention from the last ``window`` queries, average-pooled over ``pool``
               neighbouring tokens so that a kept token keeps its context.
``entropy``    the seeds' rule (seed 000 §1): a token's attention entropy (its own attention row,
               normalized by the log of the keys it may see, averaged over layers and heads); a token
               is worth keeping above ``threshold`` (0.65), and its priority decays by ``decay``
               (0.92) for every turn since it was seen. Tokens under the threshold go first.

``h2o``, ``snapkv`` and ``entropy`` need attention weights, which only eager attention returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import torch

from ..errors import ConfigError

__all__ = ["POLICIES", "SCORED", "RetentionConfig", "RetentionConfigError", "Scores", "select"]

POLICIES = ("full", "streaming", "h2o", "snapkv", "entropy")
SCORED = frozenset({"h2o", "snapkv", "entropy"})


class RetentionConfigError(ConfigError):
    """A retention configuration that cannot work (bad budget, unknown policy, wrong attention)."""


def _check_int(name: str, v: Any, low: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise RetentionConfigError(f"{name} must be an int >= {low}, got {v!r}")


@dataclass(frozen=True)
class RetentionConfig:
    """budget: a float in (0, 1] is a fraction of the context; an int >= 1 is a token count."""

    policy: str = "streaming"
    budget: float | int = 0.5
    sinks: int = 4
    recent: int = 32
    window: int = 32
    pool: int = 7
    threshold: float = 0.65
    decay: float = 0.92
    turn_tokens: int = 128

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise RetentionConfigError(f"unknown retention policy {self.policy!r}; known: {', '.join(POLICIES)}")
        b = self.budget
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b):
            raise RetentionConfigError(f"budget must be a fraction in (0, 1] or a token count >= 1, got {b!r}")
        if isinstance(b, float) and not 0.0 < b <= 1.0:
            raise RetentionConfigError(f"a fractional budget must be in (0, 1], got {b!r}")
        if isinstance(b, int) and b < 1:
            raise RetentionConfigError(f"a token budget must be >= 1, got {b!r}")
        if self.policy == "full" and b != 1.0:
            raise RetentionConfigError("policy 'full' keeps every token: its budget must be 1.0")
        for name in ("sinks", "recent"):
            _check_int(name, getattr(self, name), 0)
        for name in ("window", "pool", "turn_tokens"):
            _check_int(name, getattr(self, name), 1)
        if not 0.0 <= self.threshold <= 1.0:
            raise RetentionConfigError(f"threshold must be in [0, 1], got {self.threshold!r}")
        if not 0.0 < self.decay <= 1.0:
            raise RetentionConfigError(f"decay must be in (0, 1], got {self.decay!r}")

    @property
    def needs_scores(self) -> bool:
        return self.policy in SCORED

    @property
    def keeps_all(self) -> bool:
        return isinstance(self.budget, float) and self.budget == 1.0

    def keep_count(self, n: int) -> int:
        """How many of ``n`` tokens the budget keeps."""
        if isinstance(self.budget, float):
            return n if self.budget == 1.0 else max(1, min(n, math.ceil(self.budget * n)))
        return min(n, self.budget)

    def tag(self) -> str:
        """Every field, for namespaces: KV compressed differently must never be shared."""
        return "retain:" + ",".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))


@dataclass
class Scores:
    """Per-token statistics, indexed by original position (grown as tokens are fed)."""

    received: torch.Tensor  # float64 [n]: attention received, summed over layers, heads, queries
    recent: torch.Tensor  # float64 [n]: attention from the last ``window`` queries of the last feed
    entropy: torch.Tensor  # float64 [n]: normalized entropy of the token's own attention rows
    turn: torch.Tensor  # int64 [n]: the turn in which the token was fed

    @classmethod
    def empty(cls) -> Scores:
        z = torch.zeros(0, dtype=torch.float64)
        return cls(z, z.clone(), z.clone(), torch.zeros(0, dtype=torch.int64))

    def grow(self, n: int, turn: torch.Tensor) -> None:
        add = n - len(self.received)
        z = torch.zeros(add, dtype=torch.float64)
        self.received = torch.cat([self.received, z])
        self.recent = torch.cat([self.recent, z])
        self.entropy = torch.cat([self.entropy, z])
        self.turn = torch.cat([self.turn, turn])


def _priority(cfg: RetentionConfig, scores: Scores, pos: torch.Tensor) -> torch.Tensor:
    """Higher is kept first; ``pos`` are the candidates' original positions (ascending)."""
    if cfg.policy in ("streaming", "full"):
        return pos.to(torch.float64)
    if cfg.policy == "h2o":
        return scores.received[pos]
    if cfg.policy == "snapkv":
        s = scores.recent[pos].view(1, 1, -1)
        k = min(cfg.pool, s.shape[-1]) | 1  # odd, so the pooled score stays centred on its token
        return torch.nn.functional.avg_pool1d(s, k, stride=1, padding=k // 2, count_include_pad=False).view(-1)
    ent = scores.entropy[pos]
    age = (scores.turn.max() - scores.turn[pos]).to(torch.float64)
    prio = ent * cfg.decay**age
    return torch.where(ent >= cfg.threshold, prio, prio - 2.0)  # under the threshold: reclaimed first


def select(cfg: RetentionConfig, scores: Scores, pos: torch.Tensor, n_keep: int) -> torch.Tensor:
    """Indices into ``pos`` (ascending) of the ``n_keep`` tokens to keep."""
    n = len(pos)
    if n_keep >= n:
        return torch.arange(n)
    sinks = min(cfg.sinks, n_keep)
    recent = 0 if cfg.policy == "streaming" else min(cfg.recent, n_keep - sinks)
    if cfg.policy == "streaming":
        recent = n_keep - sinks
    protected = torch.zeros(n, dtype=torch.bool)
    protected[:sinks] = True
    if recent:
        protected[n - recent :] = True
    free = n_keep - int(protected.sum())
    chosen = protected.clone()
    if free > 0:
        prio = _priority(cfg, scores, pos).clone()
        prio[protected] = -math.inf
        # Ties (e.g. equal scores) go to the later token: stable, and recency is the safer guess.
        order = n - 1 - torch.argsort(prio.flip(0), descending=True, stable=True)
        chosen[order[:free]] = True
    return torch.nonzero(chosen).view(-1)
