"""Open-loop arrival schedules: constant, Poisson or gamma (vLLM's `--burstiness`), split across workers.

As in `vllm bench serve`: gaps are gamma(shape=burstiness, scale=1/(rate*burstiness)), so 1 is Poisson,
< 1 burstier, and `inf` (the limit: no variance) constant gaps of exactly 1/rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np


def inter_arrivals(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """n gaps in seconds with mean 1/rate; gamma shape = burstiness (1 = Poisson, inf = constant 1/rate),
    inf rate = all at once."""
    if not burstiness > 0:  # also NaN
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    if n <= 0:
        return np.zeros(0)
    if math.isinf(rate):
        return np.zeros(n)
    if not rate > 0:
        raise ValueError("request rate must be > 0")
    if math.isinf(burstiness):
        return np.full(n, 1.0 / rate)
    rng = np.random.default_rng(seed)
    theta = 1.0 / (rate * burstiness)
    return rng.gamma(shape=burstiness, scale=theta, size=n)


BLOCK = 4096  # arrivals are drawn in seeded blocks, so an unbounded run needs no length up front


def iter_schedule(
    rate: float, burstiness: float, seed: int, n: int | None = None
) -> Iterator[tuple[int, float]]:
    """(global index, intended offset in s from the run's start) of every arrival, lazily, forever or n."""
    if math.isinf(burstiness) and not math.isinf(rate):
        # constant gaps: i/rate exactly (a running sum of 1/rate would drift by rounding over a long run)
        i = 0
        while n is None or i < n:
            yield i, (i + 1) / rate
            i += 1
        return
    t, i, block = 0.0, 0, 0
    while n is None or i < n:
        gaps = inter_arrivals(BLOCK, rate, burstiness, seed * 1_000_003 + block)
        for g in gaps.tolist():
            t += g
            yield i, t
            i += 1
            if n is not None and i >= n:
                return
        block += 1


def global_schedule(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """Intended send offsets (s from the run's start) of request 0..n-1 for the whole run."""
    return np.fromiter((t for _, t in iter_schedule(rate, burstiness, seed, n)), dtype=np.float64, count=n)


def worker_iter(
    rate: float, burstiness: float, seed: int, n: int | None, worker_index: int, worker_count: int
) -> Iterator[tuple[int, float]]:
    """This worker's arrivals: every worker_count-th of the global schedule, so the total rate holds."""
    return worker_piecewise([(0.0, rate)], burstiness, seed, n, worker_index, worker_count)


def iter_piecewise(
    segments: Sequence[tuple[float, float]], burstiness: float, seed: int, n: int | None = None
) -> Iterator[tuple[int, float]]:
    """The global schedule when the rate changes live: segments [(start offset s, rate)], in time order.

    Segment 0 is exactly iter_schedule (a run without changes is unchanged); each later segment is a fresh
    seeded gamma process from its start offset; global indices continue across segments.
    """
    i = 0
    for k, (t0, rate) in enumerate(segments):
        t_end = segments[k + 1][0] if k + 1 < len(segments) else math.inf
        for _, off in iter_schedule(rate, burstiness, seed if k == 0 else seed * 7919 + k, None):
            if t0 + off >= t_end or (n is not None and i >= n):
                break
            yield i, t0 + off
            i += 1
        if n is not None and i >= n:
            return


def worker_piecewise(
    segments: Sequence[tuple[float, float]],
    burstiness: float,
    seed: int,
    n: int | None,
    worker_index: int,
    worker_count: int,
) -> Iterator[tuple[int, float]]:
    """This worker's share of iter_piecewise (every worker_count-th arrival)."""
    if worker_count < 1 or not 0 <= worker_index < worker_count:
        raise ValueError(f"bad worker split {worker_index}/{worker_count}")
    for i, t in iter_piecewise(segments, burstiness, seed, n):
        if i % worker_count == worker_index:
            yield i, t
