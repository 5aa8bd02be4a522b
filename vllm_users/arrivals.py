"""Open-loop arrival schedules: constant, Poisson or gamma (vLLM's `--burstiness`), split across workers."""

from __future__ import annotations

import math

import numpy as np


def inter_arrivals(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """n gaps in seconds with mean 1/rate; gamma shape = burstiness (1 = Poisson), inf rate = all at once."""
    if n <= 0:
        return np.zeros(0)
    if math.isinf(rate):
        return np.zeros(n)
    if rate <= 0:
        raise ValueError("request rate must be > 0")
    if burstiness <= 0:
        raise ValueError("burstiness must be > 0")
    rng = np.random.default_rng(seed)
    theta = 1.0 / (rate * burstiness)
    return rng.gamma(shape=burstiness, scale=theta, size=n)


def global_schedule(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """Intended send offsets (s from the run's start) of request 0..n-1 for the whole run."""
    return np.cumsum(inter_arrivals(n, rate, burstiness, seed))


def worker_share(offsets: np.ndarray, worker_index: int, worker_count: int) -> tuple[np.ndarray, np.ndarray]:
    """This worker's (global indices, offsets): every worker_count-th arrival, so the total rate holds."""
    if worker_count < 1 or not 0 <= worker_index < worker_count:
        raise ValueError(f"bad worker split {worker_index}/{worker_count}")
    idx = np.arange(worker_index, offsets.size, worker_count)
    return idx, offsets[idx]


def schedule_length(rate: float, run_time: float | None, num_prompts: int | None) -> int:
    """How many arrivals to draw: num_prompts, or enough for run_time at this rate (with margin)."""
    if num_prompts is not None:
        return num_prompts
    if run_time is None or math.isinf(rate):
        raise ValueError("an open-loop run needs --num-prompts or --run-time (and a finite rate for run-time)")
    return int(rate * run_time * 1.2) + 100
