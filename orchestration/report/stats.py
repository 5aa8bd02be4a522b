"""Small statistics without scipy: Student's t (CDF and quantile), mean with CI, Welch's t-test,
Mann-Whitney U, Holm's step-down correction.

The t CDF goes through the regularised incomplete beta function (continued fraction, Numerical Recipes'
`betacf`), so p-values and quantiles hold for any real degrees of freedom (Welch's are not integers).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df > 0, real)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t value below which a fraction `p` lies (bisection on t_cdf; 1e-10 accurate)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile level {p} not in (0, 1)")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


@dataclass(frozen=True)
class MeanCI:
    """Mean of repeated measurements with a two-sided t confidence interval."""

    mean: float
    half_width: float | None  # None with fewer than two values
    n: int
    std: float  # sample standard deviation (ddof 1), 0 for one value
    level: float = CONFIDENCE

    @property
    def low(self) -> float | None:
        """Lower bound of the interval."""
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        """Upper bound of the interval."""
        return None if self.half_width is None else self.mean + self.half_width

    def to_dict(self) -> dict[str, float | int | None]:
        """Plain dict for JSON."""
        return {
            "mean": self.mean,
            "ci_low": self.low,
            "ci_high": self.high,
            "ci_half_width": self.half_width,
            "std": self.std,
            "n": self.n,
            "level": self.level,
        }


def mean_ci(values: Sequence[float], level: float = CONFIDENCE) -> MeanCI:
    """Mean and the t-distribution confidence interval of `values` (repeats of one measurement)."""
    a = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if a.size == 0:
        raise ValueError("no values")
    if a.size == 1:
        return MeanCI(float(a[0]), None, 1, 0.0, level)
    sd = float(a.std(ddof=1))
    half = t_quantile(0.5 + level / 2.0, a.size - 1) * sd / math.sqrt(a.size)
    return MeanCI(float(a.mean()), half, int(a.size), sd, level)


@dataclass(frozen=True)
class TwoSampleTest:
    """The outcome of a two-sample test."""

    test: str
    statistic: float
    p_value: float
    detail: str = ""


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> TwoSampleTest:
    """Welch's unequal-variance t-test, two-sided; each sample needs >= 2 values."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.size < 2 or y.size < 2:
        raise ValueError("Welch's t-test needs at least 2 values per sample")
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    diff = float(y.mean() - x.mean())
    if vx + vy == 0.0:  # no spread at all: identical means are no difference, different ones are certain
        return TwoSampleTest(
            "Welch's t-test",
            0.0 if diff == 0 else math.copysign(math.inf, diff),
            1.0 if diff == 0 else 0.0,
            f"{x.size}+{y.size} repeats, no spread",
        )
    t = diff / math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (
        (vx**2 / (x.size - 1) if x.size > 1 else 0) + (vy**2 / (y.size - 1) if y.size > 1 else 0)
    )
    p = 2.0 * (1.0 - t_cdf(abs(t), df))
    return TwoSampleTest("Welch's t-test", t, float(min(1.0, p)), f"{x.size}+{y.size} repeats, df {df:.1f}")


def _ranks(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) of `v`, and the sizes of its tie groups."""
    order = np.argsort(v, kind="mergesort")
    s = v[order]
    edges = np.flatnonzero(np.diff(s)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [s.size]])
    avg = (starts + ends + 1) / 2.0  # mean of 1-based ranks start+1..end
    ranks = np.empty(v.size)
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks, ends - starts


def mann_whitney_u(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> TwoSampleTest:
    """Mann-Whitney U, two-sided, normal approximation with tie and continuity corrections."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs values in both samples")
    ranks, ties = _ranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    sigma2 = n1 * n2 / 12.0 * ((n + 1) - float((ties**3 - ties).sum()) / (n * (n - 1)) if n > 1 else 0.0)
    if sigma2 <= 0:
        return TwoSampleTest("Mann-Whitney U", u1, 1.0, f"{n1}+{n2} per-request samples, all tied")
    z = (abs(u1 - mu) - 0.5) / math.sqrt(sigma2)
    p = min(1.0, 2.0 * normal_sf(max(z, 0.0)))
    return TwoSampleTest("Mann-Whitney U", u1, p, f"{n1}+{n2} per-request samples")


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down: which hypotheses to reject at family-wise error `alpha`."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    reject = [False] * m
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (m - rank):
            break
        reject[i] = True
    return reject
