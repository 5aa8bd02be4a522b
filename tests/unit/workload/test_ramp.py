"""Ramped arrivals match vllm bench serve 0.32's get_request (rates, gamma gaps, no rescaling)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vllm_users.workload.ramp import ramp_rates, ramp_schedule, ramp_worker_iter


def _vllm_delays(n: int, strategy: str, start: float, end: float, burstiness: float, seed: int) -> np.ndarray:
    """vLLM's loop (vllm/benchmarks/serve.py get_request, 0.32), transcribed with a seeded generator."""
    rng = np.random.default_rng(seed)
    delays = []
    for i in range(n):
        progress = i / max(n - 1, 1)
        rate = start + (end - start) * progress if strategy == "linear" else start * (end / start) ** progress
        if burstiness == float("inf"):
            delays.append(1.0 / rate)
        else:
            delays.append(rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness)))
    return np.cumsum(delays)


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
@pytest.mark.parametrize("burstiness", [1.0, 0.5, math.inf])
def test_same_schedule_as_vllm(strategy: str, burstiness: float) -> None:
    got = ramp_schedule(500, strategy, 2.0, 50.0, burstiness, 7)
    # element-wise gamma draws with an array scale consume the generator like the scalar loop
    assert np.allclose(got, _vllm_delays(500, strategy, 2.0, 50.0, burstiness, 7), rtol=1e-12)


def test_rates() -> None:
    assert ramp_rates(5, "linear", 1, 9).tolist() == [1, 3, 5, 7, 9]
    assert ramp_rates(3, "exponential", 1, 100).tolist() == pytest.approx([1, 10, 100])
    assert ramp_rates(1, "linear", 4, 8).tolist() == [4]
    with pytest.raises(ValueError):
        ramp_rates(3, "cubic", 1, 2)


def test_constant_ramp_has_exact_gaps_and_achieved_rate_rises() -> None:
    off = ramp_schedule(101, "linear", 10, 100, math.inf, 0)
    gaps = np.diff(off)
    assert gaps[0] == pytest.approx(1 / 10.9) and gaps[-1] == pytest.approx(1 / 100)
    poisson = ramp_schedule(4000, "linear", 5, 50, 1.0, 1)
    first, last = np.diff(poisson[:400]).mean(), np.diff(poisson[-400:]).mean()
    assert 1 / first < 10 and 1 / last > 40


def test_worker_split_covers_every_arrival_once() -> None:
    parts = [list(ramp_worker_iter("linear", 1, 5, 1.0, 3, 50, w, 3)) for w in range(3)]
    merged = sorted(i for p in parts for i, _ in p)
    assert merged == list(range(50))
    full = ramp_schedule(50, "linear", 1, 5, 1.0, 3)
    assert all(off == full[i] for p in parts for i, off in p)
