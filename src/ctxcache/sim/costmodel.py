"""Prefill cost models: seconds to prefill tokens [h, L) of an L-token prompt given h cached.

t(L) = c0 + a*L + b*L^2 for a full prefill: a linear term (MLPs, projections, per-token work)
and a quadratic attention term. With h tokens cached, the remaining work is
a*(L - h) + b*(L^2 - h^2): every new token still attends to the whole prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError


@dataclass(frozen=True)
class CostModel:
    name: str
    a: float  # seconds per token
    b: float  # seconds per token^2
    c0: float = 0.0  # fixed overhead per prefill call
    source: str = ""

    def prefill_s(self, length: int, cached: int = 0) -> float:
        """Seconds to prefill a ``length``-token prompt whose first ``cached`` tokens are cached."""
        if cached >= length:
            return 0.0
        return self.c0 + self.a * (length - cached) + self.b * (length * length - cached * cached)

    def saved_s(self, length: int, cached: int) -> float:
        return self.prefill_s(length) - self.prefill_s(length, cached)


def _fit(name: str, p1: tuple[int, float], p2: tuple[int, float], source: str) -> CostModel:
    """The (a, b) through two measured (tokens, seconds) points."""
    (l1, t1), (l2, t2) = p1, p2
    b = (t2 / l2 - t1 / l1) / (l2 - l1)
    a = t1 / l1 - b * l1
    return CostModel(name, a, b, 0.0, source)


PRESETS: dict[str, CostModel] = {
    m.name: m
    for m in (
        # Measured in this project: Gemma 3 270M, fp32, transformers on the 2-core dev machine.
        _fit("gemma3-270m-cpu", (1024, 3.0), (4096, 20.1), "this project: prefill 1024 tok 3.0 s, 4096 tok 20.1 s"),
        # Derived from published figures, not measured here: Llama-3-8B (8.0e9 parameters, hidden size 4096,
        # 32 layers: Meta's model card/config) on one A100 SXM (312 TFLOPS dense BF16: NVIDIA A100
        # datasheet) at 50 % utilisation (FlashAttention-2, Dao 2023, reports 50-73 % of A100 peak).
        # Linear term: 2 FLOPs per parameter per token. Quadratic term: causal attention costs
        # 2 * L^2 * hidden FLOPs per layer (QK^T and AV, halved by the causal mask).
        CostModel(
            "llama3-8b-a100",
            a=2 * 8.0e9 / (0.5 * 312e12),
            b=2 * 4096 * 32 / (0.5 * 312e12),
            source="derived: Llama-3-8B config, A100 312 TFLOPS BF16 datasheet, 50% MFU (FlashAttention-2 paper)",
        ),
    )
}


def get_cost_model(name: str) -> CostModel:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown cost model {name!r}; known: {', '.join(sorted(PRESETS))}") from None
