"""Per-entry thresholds learned from verified hits (after vCache, with a simpler estimator).

Every entry starts at the global threshold ``t``. Feedback says, for a hit served at similarity
``s``, whether the answer was right. Two rules:
- tighten at once: after a wrong answer at ``s``, the entry never serves at or below ``s`` again;
- loosen only with evidence: the entry may serve down to a similarity ``c < t`` when the answers it
  gave at similarities >= ``c`` were all right and the one-sided Wilson upper bound (95 %) of their
  error rate is <= ``error_bound``. With error_bound = 0.02 that takes >= 133 right answers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.6449


def wilson_upper(errors: int, n: int, z: float = Z95) -> float:
    if n == 0:
        return 1.0
    p = errors / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / (1 + z * z / n))


def entry_threshold(base: float, observations: Sequence[tuple[float, bool]], error_bound: float | None) -> float:
    wrong = [s for s, ok in observations if not ok]
    t = max([base, *(math.nextafter(s, 2.0) for s in wrong)])
    if error_bound is None or wrong and max(wrong) >= base:
        return t
    floor = max(wrong, default=-1.0)
    right = sorted((s for s, ok in observations if ok and floor < s < base), reverse=True)
    above = sum(1 for s, ok in observations if ok and s >= base)
    for i, c in enumerate(right):
        if wilson_upper(0, above + i + 1) <= error_bound:
            t = min(t, c)
    return t
