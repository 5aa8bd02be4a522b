"""Lossless histogram merge across workers; open-loop schedules and their split."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_users.measure.histograms import HistogramSet
from vllm_users.measure.record import RequestRecord
from vllm_users.workload.arrivals import global_schedule, inter_arrivals, worker_iter


def _records(n: int, seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        gaps = rng.integers(1000, 40000, size=int(rng.integers(1, 20)))
        chunks = (np.cumsum(gaps) + int(rng.integers(5000, 900000))).tolist()
        out.append(RequestRecord("chat", "w", 0, i, "chat", 0.0, chunk_times_us=chunks, end_us=chunks[-1],
                                 output_tokens=len(chunks)))  # fmt: skip
    return out


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_split_over_workers_equals_one_histogram(workers: int) -> None:
    recs = _records(2000, 1)
    one = HistogramSet()
    for r in recs:
        one.add_record(r)
    parts = [HistogramSet() for _ in range(workers)]
    for i, r in enumerate(recs):
        parts[i % workers].add_record(r)
    master = HistogramSet()
    for p in parts:
        master.merge_encoded(p.encode())  # the wire format workers send
    for key, h in one.hists.items():
        m = master.hists[key]
        assert m.get_total_count() == h.get_total_count()
        for pct in (1, 50, 90, 99, 99.9, 100):
            assert m.get_value_at_percentile(pct) == h.get_value_at_percentile(pct)


def test_histogram_precision_three_digits() -> None:
    hs = HistogramSet()
    r = RequestRecord("chat", "w", 0, 0, "chat", 0.0, chunk_times_us=[50_123, 60_321], end_us=60_400, output_tokens=2)
    hs.add_record(r)
    ttft = hs.get("chat", "ttft").get_value_at_percentile(50)
    assert abs(ttft - 50_123) / 50_123 < 1e-3


def test_gamma_schedule_rate_and_burstiness() -> None:
    n, rate = 20000, 50.0
    cvs = {}
    for b in (0.5, 1.0, 4.0):
        gaps = inter_arrivals(n, rate, b, seed=3)
        assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
        cvs[b] = gaps.std() / gaps.mean()
    assert cvs[0.5] > cvs[1.0] > cvs[4.0]
    assert cvs[1.0] == pytest.approx(1.0, rel=0.05)  # Poisson


def test_same_seed_same_schedule_and_split_keeps_total() -> None:
    a = global_schedule(1000, 10.0, 1.0, seed=9)
    b = global_schedule(1000, 10.0, 1.0, seed=9)
    assert np.array_equal(a, b)
    shares = [list(worker_iter(10.0, 1.0, 9, 1000, i, 3)) for i in range(3)]
    idx = np.sort(np.concatenate([[i for i, _ in s] for s in shares]))
    assert np.array_equal(idx, np.arange(1000))
    assert all(a[i] == t for s in shares for i, t in s)  # each worker's times are the global schedule's
    with pytest.raises(ValueError):
        list(worker_iter(10.0, 1.0, 9, 1000, 3, 3))
