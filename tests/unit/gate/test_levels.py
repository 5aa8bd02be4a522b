"""The gate's family-wise level: with k rules each gets a two-sided interval at 1 - 2 (1 - confidence) / k, so
the chance that any rule's one-sided verdict calls noise a regression stays at most 1 - confidence (Bonferroni)."""

from __future__ import annotations

import pytest

from orchestration.gate.verdict import level_per_rule


def test_one_rule_gets_the_two_sided_level_of_its_one_sided_confidence() -> None:
    assert level_per_rule(0.95, 1) == pytest.approx(0.90)


def test_more_rules_widen_each_interval_by_bonferroni() -> None:
    assert level_per_rule(0.95, 5) == pytest.approx(0.98)
    levels = [level_per_rule(0.95, k) for k in range(1, 9)]
    assert levels == sorted(levels) and all(0 < lv < 1 for lv in levels)
    # the one-sided miss rates of k rules add up to the family's: k * (1 - level) / 2 == 1 - confidence
    assert all(k * (1 - lv) / 2 == pytest.approx(0.05) for k, lv in enumerate(levels, start=1))


def test_no_rules_is_treated_as_one() -> None:
    assert level_per_rule(0.99, 0) == level_per_rule(0.99, 1) == pytest.approx(0.98)
