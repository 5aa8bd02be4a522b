"""`--find-max-rate`'s range: two searches land in each other's ranges, where the bracket alone does not.

Ten real pairs of searches against the simulator cost ~20 minutes on this machine (each search is up to 8 runs),
too slow for the suite. So the range logic is tested on seeded synthetic searches: the same search loop
(`next_rate`, the tolerance stop, 8 steps, a step's size from the rate), each step's verdict from a p99 over a
sample of a known latency distribution whose median climbs as the rate nears a capacity of 20 req/s. One real
pair against the simulator runs in tests/integration/capacity/test_find_max_rate.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from orchestration.capacity import search as S
from orchestration.capacity.search_range import quantile_ci, search_range, slo_intervals

CAPACITY, SIGMA, TOLERANCE, STEPS = 20.0, 0.25, 0.025, 8
PAIRS = 40
LIMIT_MS = 10.0 * float(np.exp(2.33 * SIGMA)) * 1.5  # 1.5 x the p99 of an idle server


def _step(rng: np.random.Generator, rate: float) -> dict[str, Any]:
    n = int(min(S.STEP_MAX, max(S.STEP_MIN, round(rate * S.STEP_SECONDS))))
    median = 10.0 / np.sqrt(max(1e-3, 1.0 - rate / CAPACITY))
    x = median * rng.lognormal(0.0, SIGMA, n)
    p99 = float(np.percentile(x, 99.0))
    held = p99 <= LIMIT_MS
    return {
        "target": rate,
        "verdict": "holds" if held else "fails",
        "judgement": {
            "percentile": "p99",
            "reasons": [] if held else [f"p99 TPOT {p99:.1f} ms > {LIMIT_MS:g} ms"],
            "slo_ci_ms": slo_intervals({"tpot": x}, {"tpot": LIMIT_MS}, 99.0),
        },
    }


def _search(seed: int) -> tuple[float | None, float | None, dict[str, Any] | None]:
    """run_search's loop on synthetic steps: (answer, lowest failure, range)."""
    rng = np.random.default_rng(seed)
    steps: list[dict[str, Any]] = []
    lo = hi = None
    failures = 0
    rate = round(CAPACITY * float(rng.uniform(0.95, 1.05)), 3)  # the probe's capacity, measured
    while len(steps) < STEPS - 1:
        s = _step(rng, rate)
        steps.append(s)
        if s["verdict"] == "holds":
            lo = rate if lo is None else max(lo, rate)
        else:
            failures += 1
            hi = rate if hi is None else min(hi, rate)
        if lo is not None and hi is not None and hi - lo <= TOLERANCE * lo:
            break
        rate = round(S.next_rate(lo, hi, failures), 3)
    return lo, hi, search_range(steps, lo, hi, TOLERANCE)


def _inside(x: float | None, low: float | None, high: float | None) -> bool:
    """`x` in [low, high); an open end counts as a miss, so a range the steps cannot pin never passes."""
    return x is not None and low is not None and high is not None and low <= x < high


def test_two_searches_land_in_each_others_ranges() -> None:
    pairs = [(_search(2 * i), _search(2 * i + 1)) for i in range(PAIRS)]
    ranged = bracketed = 0
    for a, b in pairs:
        ra, rb = a[2], b[2]
        assert ra is not None and rb is not None
        for x, r in ((a[0], ra), (b[0], rb)):  # the answer lies in its own range (an open end: no bound)
            assert (
                x is not None and (r["low"] is None or r["low"] <= x) and (r["high"] is None or x < r["high"])
            )
        ranged += _inside(a[0], rb["low"], rb["high"]) and _inside(b[0], ra["low"], ra["high"])
        bracketed += _inside(a[0], b[0], b[1]) and _inside(b[0], a[0], a[1])
    assert ranged >= 0.9 * PAIRS, ranged
    assert bracketed <= 0.3 * PAIRS, (
        bracketed
    )  # the bisection's bracket is no uncertainty: it rarely holds the other


def test_quantile_ci_levels_and_reach() -> None:
    rng = np.random.default_rng(7)
    x = rng.exponential(10.0, 100)
    ci = quantile_ci(x, 99.0)
    assert ci is not None and ci["n"] == 100
    lo_level, hi_level = ci["levels"]
    assert 0.90 < lo_level < 0.95 and 0.999 < hi_level < 1.0
    assert ci["low"] < float(np.percentile(x, 99.0)) < ci["high"]
    assert ci["high"] > float(x.max())  # beyond the sample: the fitted tail, not its largest value
    # the reach covers a repeat's p99 about as often as it claims
    repeats = [float(np.percentile(rng.exponential(10.0, 100), 99.0)) for _ in range(400)]
    covered = np.mean([ci["low"] <= r <= ci["high"] for r in repeats])
    assert covered > 0.9
    assert quantile_ci([], 99.0) is None


def test_intervals_side_and_no_range_without_a_bracket() -> None:
    iv = slo_intervals({"ttft": np.full(50, 100.0)}, {"ttft": 200.0, "tpot": 10.0}, 99.0)
    assert iv["ttft"]["side"] == "under" and "tpot" not in iv  # no tpot samples: no interval, never 0
    iv = slo_intervals({"ttft": np.full(50, 300.0)}, {"ttft": 200.0}, 99.0)
    assert iv["ttft"]["side"] == "over"
    assert search_range([], None, 5.0, TOLERANCE) is None and search_range([], 5.0, None, TOLERANCE) is None


@pytest.mark.parametrize("n", [30, 300])
def test_binomial_levels_bracket_the_rank(n: int) -> None:
    ci = quantile_ci(np.arange(n, dtype=float), 50.0)
    assert ci is not None and ci["levels"][0] < 0.5 < ci["levels"][1]
