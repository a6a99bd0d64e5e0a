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
        # Published GPU figure: Llama-3-8B prefill on one A100-80GB ~ 10k tokens/s at 2k context
        # with quadratic growth from FlashAttention-2 attention FLOPs (see docs/policies.md).
        CostModel(
            "llama3-8b-a100",
            a=1.0 / 11_000.0,
            b=2.0 * 32 * 4096 / 312e12 * 2.0,
            source="~11k prefill tok/s (A100, 8B, 2k ctx) + attention 4*L^2*d*layers FLOPs at 312 TFLOPS",
        ),
    )
}


def get_cost_model(name: str) -> CostModel:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown cost model {name!r}; known: {', '.join(sorted(PRESETS))}") from None
