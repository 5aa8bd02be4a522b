"""Ramped open-loop arrivals (`--ramp-up-strategy linear|exponential --ramp-up-start-rps --ramp-up-end-rps`),
as `vllm bench serve` 0.32 draws them (vllm/benchmarks/serve.py, get_request):

request i of N has the rate r_i = start + (end - start) * i / (N - 1) (linear) or start * (end / start) **
(i / (N - 1)) (exponential); the gap before it is gamma(shape=burstiness, scale=1 / (r_i * burstiness))
(constant 1 / r_i when burstiness is inf); its send time is the running sum of gaps, the first one included.
Unlike a fixed rate, the sum is not rescaled.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

STRATEGIES = ("linear", "exponential")


def ramp_rates(n: int, strategy: str, start_rps: float, end_rps: float) -> np.ndarray:
    """The request rate in force for each of the n requests."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown ramp-up strategy {strategy!r}: expected linear or exponential")
    if not (start_rps > 0 and end_rps > 0):
        raise ValueError("ramp-up rates must be > 0")
    progress = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    return start_rps * (end_rps / start_rps) ** progress


def ramp_schedule(
    n: int, strategy: str, start_rps: float, end_rps: float, burstiness: float, seed: int
) -> np.ndarray:
    """Intended send offsets (s from the run's start) of requests 0..n-1."""
    if n <= 0:
        return np.zeros(0)
    rates = ramp_rates(n, strategy, start_rps, end_rps)
    if math.isinf(burstiness):
        gaps = 1.0 / rates
    else:
        gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (rates * burstiness))
    return np.cumsum(gaps)


def ramp_worker_iter(
    strategy: str,
    start_rps: float,
    end_rps: float,
    burstiness: float,
    seed: int,
    n: int,
    worker_index: int,
    worker_count: int,
) -> Iterator[tuple[int, float]]:
    """This worker's arrivals of the ramp: every worker_count-th of the global schedule."""
    if worker_count < 1 or not 0 <= worker_index < worker_count:
        raise ValueError(f"bad worker split {worker_index}/{worker_count}")
    offsets = ramp_schedule(n, strategy, start_rps, end_rps, burstiness, seed)
    for i in range(worker_index, n, worker_count):
        yield i, float(offsets[i])
