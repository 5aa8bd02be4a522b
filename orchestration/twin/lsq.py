"""Least squares for the twin's fit: a line and a plane, each with its coefficients' uncertainties.

Shared by the fit (fit.py) and the probe's plan (phases.py: the burst's size from the TTFT slope so far), which
cannot import fit.py without a circle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RESOLUTION_MS", "SIGMAS", "Line", "linfit", "planefit"]

SIGMAS = 3.0  # an uncertainty is 3 standard errors (about 99.7 % for normal noise)
RESOLUTION_MS = 0.5  # the floor: a server with no visible noise still has its points on a clock


@dataclass(frozen=True)
class Line:
    """y = a + b·x by least squares, with the uncertainties of a and b (SIGMAS standard errors, floored)."""

    a: float
    b: float
    ua: float
    ub: float
    n: int
    resid_sd: float


def linfit(xs: list[float], ys: list[float]) -> Line:
    """Least-squares line through (xs, ys); ValueError with fewer than 2 distinct x."""
    n = len(xs)
    if n < 2 or len(set(xs)) < 2:
        raise ValueError("a line needs points at two different x at least")
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    resid = [y - (a + b * x) for x, y in zip(xs, ys, strict=True)]
    dof = n - 2
    s2 = sum(r * r for r in resid) / dof if dof > 0 else 0.0
    se_b = math.sqrt(s2 / sxx)
    se_a = math.sqrt(s2 * (1.0 / n + mx * mx / sxx))
    span = max(xs) - min(xs)
    return Line(
        a, b, max(SIGMAS * se_a, RESOLUTION_MS), max(SIGMAS * se_b, RESOLUTION_MS / span), n, math.sqrt(s2)
    )


def planefit(rows: list[tuple[float, float]], ys: list[float]) -> tuple[list[float], list[float], float]:
    """y = a + b·x1 + k·x2 by least squares: the coefficients, their standard errors, the residuals' SD.
    ValueError when the points do not fix a plane (fewer than 4, or x1 and x2 collinear)."""
    n = len(rows)
    if n < 4:
        raise ValueError("a plane needs 4 points at least")
    # centred, so that the normal equations are 2x2 and well conditioned whatever the scale of x2 (tokens)
    m1, m2, my = sum(r[0] for r in rows) / n, sum(r[1] for r in rows) / n, sum(ys) / n
    s11 = sum((r[0] - m1) ** 2 for r in rows)
    s22 = sum((r[1] - m2) ** 2 for r in rows)
    s12 = sum((r[0] - m1) * (r[1] - m2) for r in rows)
    sy1 = sum((r[0] - m1) * (y - my) for r, y in zip(rows, ys, strict=True))
    sy2 = sum((r[1] - m2) * (y - my) for r, y in zip(rows, ys, strict=True))
    det = s11 * s22 - s12 * s12
    if det <= 1e-9 * s11 * s22 or det <= 0:
        raise ValueError("the points do not fix a plane (collinear)")
    b, k = (s22 * sy1 - s12 * sy2) / det, (s11 * sy2 - s12 * sy1) / det
    a = my - b * m1 - k * m2
    resid = [y - (a + b * x1 + k * x2) for (x1, x2), y in zip(rows, ys, strict=True)]
    s2 = sum(r * r for r in resid) / (n - 3)
    var_a = s2 * (1.0 / n + (s22 * m1 * m1 - 2 * s12 * m1 * m2 + s11 * m2 * m2) / det)
    return [a, b, k], [math.sqrt(var_a), math.sqrt(s2 * s22 / det), math.sqrt(s2 * s11 / det)], math.sqrt(s2)
