"""Constant-rate arrivals (`--burstiness inf`, vLLM's limit of the gamma) and their split across workers."""

from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from vllm_users.options import from_namespace
from vllm_users.workload.arrivals import global_schedule, inter_arrivals, iter_schedule, worker_iter


def test_constant_gaps_are_exactly_one_over_rate() -> None:
    gaps = inter_arrivals(5000, 8.0, math.inf, seed=1)
    assert np.all(gaps == 0.125)
    sched = global_schedule(100_000, 3.0, math.inf, seed=7)
    assert np.array_equal(sched, (np.arange(100_000) + 1) / 3.0)  # no drift from summing 1/3 a 100k times
    assert np.all(np.diff(sched) == pytest.approx(1 / 3.0, abs=1e-9))
    # the seed does not matter: there is nothing random left
    assert np.array_equal(sched[:50], global_schedule(50, 3.0, math.inf, seed=99))


def test_constant_schedule_split_over_workers_keeps_rate_and_order() -> None:
    rate, n, workers = 20.0, 1000, 3
    shares = [list(worker_iter(rate, math.inf, 0, n, w, workers)) for w in range(workers)]
    idx = np.sort(np.concatenate([[i for i, _ in s] for s in shares]))
    assert np.array_equal(idx, np.arange(n))  # every arrival once, none twice
    for w, share in enumerate(shares):
        times = np.array([t for _, t in share])
        assert np.array_equal(times, (np.arange(w, n, workers) + 1) / rate)
        assert np.allclose(np.diff(times), workers / rate)  # each worker sends at rate/workers, evenly


def test_unbounded_constant_schedule_and_infinite_rate() -> None:
    it = iter_schedule(4.0, math.inf, 0)
    assert [next(it) for _ in range(3)] == [(0, 0.25), (1, 0.5), (2, 0.75)]
    assert np.all(global_schedule(10, math.inf, math.inf, 0) == 0)  # rate inf: all at once, as in vLLM


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_bad_burstiness_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="burstiness"):
        inter_arrivals(10, 5.0, bad, 0)

    # the option table's check, on Locust's options as they arrive (command line, web UI, spawn message)
    with pytest.raises(argparse.ArgumentTypeError, match="is not a number > 0"):
        from_namespace(argparse.Namespace(burstiness=bad))


def test_gamma_is_unchanged_for_finite_burstiness() -> None:
    gaps = inter_arrivals(20_000, 50.0, 4.0, seed=3)
    assert gaps.std() > 0 and gaps.mean() == pytest.approx(1 / 50.0, rel=0.03)
