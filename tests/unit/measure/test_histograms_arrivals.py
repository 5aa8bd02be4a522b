"""Lossless histogram merge across workers; open-loop schedules and their split."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_users.measure.histograms import HistogramSet
from vllm_users.measure.record import RequestRecord
from vllm_users.workload.arrivals import (
    global_schedule,
    inter_arrivals,
    iter_piecewise,
    worker_iter,
    worker_piecewise,
)


def _records(n: int, seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        gaps = rng.integers(1000, 40000, size=int(rng.integers(1, 20)))
        chunks = (np.cumsum(gaps) + int(rng.integers(5000, 900000))).tolist()
        out.append(
            RequestRecord(
                "chat",
                "w",
                0,
                i,
                "chat",
                0.0,
                chunk_times_us=chunks,
                end_us=chunks[-1],
                output_tokens=len(chunks),
            )
        )
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
    r = RequestRecord(
        "chat", "w", 0, 0, "chat", 0.0, chunk_times_us=[50_123, 60_321], end_us=60_400, output_tokens=2
    )
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


def test_live_rate_change_keeps_the_past_and_splits_the_future() -> None:
    base = global_schedule(200, 10.0, 1.0, seed=4)
    t_change = float(base[99]) + 0.01  # after the 100th arrival
    segs = [(0.0, 10.0), (t_change, 40.0)]
    sched = list(iter_piecewise(segs, 1.0, 4, 1000))
    idx = np.array([i for i, _ in sched])
    t = np.array([x for _, x in sched])
    assert np.array_equal(idx, np.arange(1000)) and np.all(np.diff(t) >= 0)
    assert np.array_equal(t[:100], base[:100])  # before the change: exactly the original schedule
    after = t[t >= t_change]
    assert (len(after) - 1) / (after[-1] - after[0]) == pytest.approx(40.0, rel=0.1)
    shares = [list(worker_piecewise(segs, 1.0, 4, 1000, i, 2)) for i in range(2)]
    assert sorted(i for s in shares for i, _ in s) == list(range(1000))
    assert all(dict(sched)[i] == x for s in shares for i, x in s)


def test_slo_met_by_one_record_agrees_with_the_columns() -> None:
    from vllm_users.measure.columns import as_columns
    from vllm_users.measure.metrics import Slo, ok_rows, rows, slo_met
    from vllm_users.measure.record import RequestRecord

    recs = [
        RequestRecord(
            scenario="chat",
            worker="w",
            user=1,
            seq=k,
            endpoint="chat",
            t_start=float(k),
            chunk_times_us=[ttft, ttft + 9000 * k],
            end_us=ttft + 9000 * k + 10,
            output_tokens=k + 1,
        )
        for k, ttft in enumerate([20_000, 60_000, 30_000, 45_000, 10_000])
    ]
    slo = Slo.parse(["ttft:50 tpot:25"])
    c = as_columns(recs)
    ok = ok_rows(c, rows(c))
    met = slo_met(c, ok, slo)
    expect = np.logical_and.reduce(list(met.values()))
    assert [slo.met_by(r) for r in recs] == list(expect)


def test_record_many_equals_record_value_one_by_one() -> None:
    from vllm_users.measure.histograms import HIGHEST_US, new_histogram, record_many

    rng = np.random.default_rng(5)
    values = np.concatenate(
        [
            rng.integers(-5, 3000, 4000),
            rng.integers(1, 10**6, 4000),
            rng.integers(1, 2 * HIGHEST_US, 500),
            np.array([0, 1, 2, 1023, 1024, 2047, 2048, 4095, 4096, HIGHEST_US, 2**40], dtype=np.int64),
        ]
    )
    one, bulk = new_histogram(), new_histogram()
    for v in values.tolist():
        one.record_value(max(v, 1))
    record_many(bulk, values)
    assert bulk.get_total_count() == one.get_total_count() > 0
    assert (bulk.get_min_value(), bulk.get_max_value()) == (one.get_min_value(), one.get_max_value())
    assert list(bulk.counts) == list(one.counts)
    assert bulk.encode() == one.encode()


def test_lazy_histograms_equal_per_value_recording() -> None:
    from vllm_users.measure.metrics import tpot_s

    recs = _records(500, 7)
    recs[3].error = "http"  # failures stay out
    hs = HistogramSet()
    for r in recs:
        hs.add_record(r)
    ref: dict[str, list[int]] = {"ttft": [], "e2el": [], "itl": [], "tpot": []}
    for r in recs:
        if r.error is not None:
            continue
        c = r.chunk_times_us
        ref["ttft"].append(c[0])
        ref["e2el"].append(c[-1])
        ref["itl"] += [b - a for a, b in zip(c, c[1:], strict=False)]
        t = tpot_s(r)
        if t is not None:
            ref["tpot"].append(round(t * 1e6))
    from vllm_users.measure.histograms import new_histogram

    for metric, vals in ref.items():
        want = new_histogram()
        for v in vals:
            want.record_value(max(v, 1))
        h = hs.get("chat", metric)
        assert h.get_total_count() == len(vals) > 0
        assert list(h.counts) == list(want.counts)
        assert (h.get_min_value(), h.get_max_value()) == (want.get_min_value(), want.get_max_value())
    # recording more after a read keeps adding
    hs.add_record(recs[0])
    assert hs.get("chat", "ttft").get_total_count() == len(ref["ttft"]) + 1


def test_record_json_has_every_field_like_asdict() -> None:
    import dataclasses
    import json

    r = _records(1, 3)[0]
    r.extra = {"a": [1, {"b": None}]}
    r.host, r.replica = "10.0.0.1:8000", "pod-1"
    want = dataclasses.asdict(r)
    assert json.loads(r.to_json()) == want
    r.host = r.replica = None  # a run against one server: its lines as before several could be named
    del want["host"], want["replica"]
    assert json.loads(r.to_json()) == want
    r.extra = None
    del want["extra"]
    assert json.loads(r.to_json()) == want
    assert RequestRecord(**json.loads(r.to_json())) == r
