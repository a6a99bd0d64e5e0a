"""Per-entry thresholds (vCache-style): tighten at once on a wrong hit, loosen only with evidence."""

from __future__ import annotations

import math

import pytest

from ctxcache.semantic import entry_threshold, wilson_upper


def test_no_evidence_keeps_the_global_threshold():
    assert entry_threshold(0.86, [], 0.02) == 0.86
    assert entry_threshold(0.86, [(0.8, True)] * 500, None) == 0.86  # no error bound: never loosens


def test_a_wrong_answer_raises_the_threshold_above_it():
    t = entry_threshold(0.86, [(0.9, False)], 0.02)
    assert t > 0.9 and math.isclose(t, 0.9, abs_tol=1e-12)


def test_loosens_only_when_the_wilson_bound_allows():
    few = [(0.80, True)] * 50
    assert entry_threshold(0.86, few, 0.02) == 0.86  # 50 right answers: bound still above 2 %
    many = [(0.80, True)] * 200
    assert entry_threshold(0.86, many, 0.02) == pytest.approx(0.80)
    # A wrong answer at 0.82 puts a floor under any loosening.
    assert entry_threshold(0.86, [*many, (0.82, False)], 0.02) == 0.86


def test_wilson_upper_bound():
    assert wilson_upper(0, 0) == 1.0
    assert 0.019 < wilson_upper(0, 133) <= 0.02 < wilson_upper(0, 132)
