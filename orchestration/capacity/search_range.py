"""The statistical uncertainty of `--find-max-rate`'s answer, beside the bisection's resolution.

The bracket [highest pass, lowest failure) is the search's resolution: how close bisection got. It says nothing
of chance: a step's verdict rests on a p99 over 30-300 requests, and near the maximum a second step of the same
size lands on the other side of the SLO (a sweep's rate 20 held with TPOT p99 21.7 ms, a search's 19.9 failed
with 39.1 ms).

For each SLO metric of a step, `quantile_ci` says where a second step of as many requests would measure its
percentile: the statistic is the k-th smallest of n, whose level in the latency distribution is
Beta(k, n + 1 - k) whatever the distribution; the two levels are read off the step's sample (beyond its top
tenth, an exponential tail fitted to that tenth: 100 requests have no value above their largest).

A least-squares line of log(SLO percentile / limit) against the rate, over the steps within FIT_SPAN of the
bracket, gives the latency's slope. Along it, the range's low end is where the held step's upper reach would
clear the limit, less the search tolerance (a second search stops that far under its own first failure), and
its high end where the failed step's lower reach would meet it. A second search's answer falls into that range
(tests/unit/capacity/test_search_range.py: 36 of 40 seeded pairs land in each other's ranges).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["CONFIDENCE", "quantile_ci", "search_range", "slo_intervals"]

FIT_SPAN = 1.5  # the rates fitted: within 1.5 x of the bracket (the probe's far-off failures left out)
CONFIDENCE = 0.999  # per step: a search's answer moves when any of its ~6 steps flips (~99.4 % for all six)


def _binom_cdf(n: int, p: float) -> np.ndarray:
    """P(Binomial(n, p) <= k) for k = 0..n, in log space (no scipy)."""
    if p <= 0.0:
        return np.ones(n + 1)
    if p >= 1.0:
        return np.concatenate([np.zeros(n), np.ones(1)])
    k = np.arange(1, n + 1, dtype=np.float64)
    log_comb = np.concatenate([np.zeros(1), np.cumsum(np.log(n - k + 1) - np.log(k))])
    ks = np.arange(n + 1, dtype=np.float64)
    pmf = np.exp(log_comb + ks * math.log(p) + (n - ks) * math.log1p(-p))
    cdf: np.ndarray = np.minimum(np.cumsum(pmf), 1.0)
    return cdf


def _beta_quantile(n: int, k: int, q: float) -> float:
    """The q-quantile of U_(k), the k-th smallest of n uniforms: the u where P(Binomial(n, u) >= k) = q."""
    a, b = 0.0, 1.0
    for _ in range(40):  # bisection: 2^-40 of the unit interval
        u = (a + b) / 2.0
        if 1.0 - float(_binom_cdf(n, u)[k - 1]) < q:
            a = u
        else:
            b = u
    return (a + b) / 2.0


def _value_at(x: np.ndarray, u: float) -> float:
    """The sample's u-quantile; beyond its top tenth, an exponential tail fitted to that tenth (the mean excess
    over the threshold), since a step of n requests has no value above its largest."""
    n = int(x.size)
    k = max(5, n // 10)
    if k >= n or u <= 1.0 - k / n:
        return float(np.quantile(x, u))
    t = float(x[n - k - 1])
    beta = float(np.mean(x[n - k :] - t))
    return t + beta * math.log(k / (n * max(1.0 - u, 1e-12)))


def quantile_ci(values: Sequence[float] | np.ndarray, percentile: float) -> dict[str, Any] | None:
    """Where a second step of as many requests would measure the `percentile` of `values`, with CONFIDENCE:
    {low, high, n, levels}; None without values.

    The statistic sits at rank k = p x (n - 1) + 1 of n; the k-th smallest of n draws falls at a level of the
    latency distribution that is Beta(k, n + 1 - k)-distributed, whatever the distribution: `levels` are its
    0.05 % and 99.95 % quantiles (for a p99 of 100 requests: 0.904 and 0.9997), read off this sample."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = int(x.size)
    if n == 0:
        return None
    k = min(n, max(1, round(percentile / 100.0 * (n - 1)) + 1))
    tail = (1.0 - CONFIDENCE) / 2.0
    u_lo, u_hi = _beta_quantile(n, k, tail), _beta_quantile(n, k, 1.0 - tail)
    return {
        "low": _value_at(x, u_lo),
        "mid": float(np.percentile(x, percentile)),
        "high": _value_at(x, u_hi),
        "n": n,
        "levels": [u_lo, u_hi],
    }


def slo_intervals(
    samples_ms: Mapping[str, np.ndarray], limits_ms: Mapping[str, float], percentile: float
) -> dict[str, dict[str, Any]]:
    """Each SLO metric's quantile interval (ms), with `side`: "under" (clear pass), "over" (clear failure) or
    "straddles" (the limit lies within it)."""
    out: dict[str, dict[str, Any]] = {}
    for m, lim in limits_ms.items():
        ci = quantile_ci(samples_ms.get(m, np.zeros(0)), percentile)
        if ci is None:
            continue
        side = "under" if ci["high"] <= lim else ("over" if ci["low"] > lim else "straddles")
        out[m] = {**ci, "limit": lim, "side": side}
    return out


def _reach(step: Mapping[str, Any], end: str) -> float | None:
    """A step's `end` ("low"/"high") of its SLO intervals as a multiple of the limit, the most binding metric."""
    cis = ((step.get("judgement") or {}).get("slo_ci_ms") or {}).values()
    vals = [c[end] / c["limit"] for c in cis if c.get("limit") and c.get(end)]
    return max(vals) if vals else None


def _slope(points: list[tuple[float, float]]) -> float | None:
    """d log(value) / d rate of a least-squares line over `points` (rate, value); None unless it rises."""
    if len({r for r, _ in points}) < 2:
        return None
    slope = float(np.polyfit([p[0] for p in points], np.log([max(p[1], 1e-9) for p in points]), 1)[0])
    return slope if slope > 0 else None


def search_range(
    steps: Sequence[Mapping[str, Any]], lo: float | None, hi: float | None, tolerance: float
) -> dict[str, Any] | None:
    """The range of rates a second search's answer falls into (see the module's docstring); an end the steps
    do not pin is None (open). None without a bracket."""
    if lo is None or hi is None:
        return None
    near = [
        s
        for s in steps
        if s.get("verdict") in ("holds", "fails")
        and s.get("target") is not None
        and lo / FIT_SPAN <= float(s["target"]) <= hi * FIT_SPAN
    ]
    slope = _slope([(float(s["target"]), v) for s in near if (v := _reach(s, "mid")) is not None])
    at_lo = next((s for s in near if s["target"] == lo and s["verdict"] == "holds"), None)
    at_hi = next((s for s in near if s["target"] == hi and s["verdict"] == "fails"), None)
    up = _reach(at_lo, "high") if at_lo else None
    down = _reach(at_hi, "low") if at_hi else None
    low = high = None
    if slope is not None and up is not None:
        # down from the answer until its step's upper reach clears the limit; then the tolerance under it
        low = min(lo, lo - math.log(up) / slope) / (1.0 + tolerance)
        low = low if low > 0 else None
    if slope is not None and down is not None:
        high = max(hi, hi - math.log(down) / slope)
    return {
        "low": low,
        "high": high,
        "confidence": CONFIDENCE,
        "meaning": (
            f"a second search's answer falls in [low, high): where the SLO percentile of a repeat of the "
            f"boundary steps could land ({CONFIDENCE:.1%}), moved along the latency's slope over the rates "
            "tried until it clears the limit; low is widened by the search tolerance (None: not pinned)"
        ),
    }
