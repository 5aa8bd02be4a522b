"""Metric definitions against hand-computed answers (vLLM bench serve's conventions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.measure.helpers import assert_same, rand_records, rec
from vllm_users.measure import metrics as M
from vllm_users.measure.columns import columns_from_records
from vllm_users.measure.metrics import Slo, metric_arrays, peak_concurrency, tpot_s
from vllm_users.measure.result_fields import compute_metrics, per_scenario


def test_ttft_tpot_itl_e2el_by_hand() -> None:
    a = rec(100.0, [50, 60, 70, 80], out=4)  # ttft 50, e2el 80, tpot (80-50)/3 = 10
    b = rec(100.5, [20, 50], out=3)  # ttft 20, e2el 50, tpot 30/2 = 15 (tokens from usage, not chunks)
    c = rec(101.0, [30], out=1)  # tpot undefined (one token)
    res = compute_metrics([a, b, c], percentiles=(50, 99))
    assert res["completed"] == 3 and res["failed"] == 0
    assert res["mean_ttft_ms"] == pytest.approx((50 + 20 + 30) / 3)
    assert res["median_ttft_ms"] == pytest.approx(30)
    assert res["std_ttft_ms"] == pytest.approx(np.std([50, 20, 30]))  # population std
    assert res["mean_tpot_ms"] == pytest.approx(12.5)
    assert sorted([10, 10, 10, 30]) == [10, 10, 10, 30]
    assert res["mean_itl_ms"] == pytest.approx((10 + 10 + 10 + 30) / 4)  # pooled gaps of all requests
    assert res["p99_itl_ms"] == pytest.approx(np.percentile([10, 10, 10, 30], 99))
    assert res["mean_e2el_ms"] == pytest.approx((80 + 50 + 30) / 3)
    assert res["total_output_tokens"] == 8
    assert res["total_input_tokens"] == 30
    # duration: first start 100.0 -> last end 101.0 + 31 ms
    assert res["duration"] == pytest.approx(1.031)
    assert res["output_throughput"] == pytest.approx(8 / 1.031)
    assert res["chunk_token_ratio"] == pytest.approx(7 / 8)


def test_failures_are_not_in_latency_and_interrupted_and_dropped_are_apart() -> None:
    ok = rec(0.0, [10, 20], out=2)
    bad = rec(0.0, [], out=None, error="http", status=500)
    inband = rec(0.0, [1], out=1, error="inband_error")  # fast "success" must not count
    intr = rec(0.0, [5], out=None, error="interrupted")
    dropped = rec(0.0, [], out=None, error="dropped", t_intended=0.0)
    res = compute_metrics([ok, bad, inband, intr, dropped])
    assert res["completed"] == 1
    assert res["failed"] == 2
    assert res["interrupted"] == 1
    assert res["median_ttft_ms"] == pytest.approx(10)
    assert res["errors_by_kind"] == {"http": 1, "inband_error": 1}
    assert res["http_errors_by_status"] == {"500": 1}


def test_tpot_uses_usage_tokens_not_chunks() -> None:
    r = rec(0.0, [10, 40], out=7)  # 2 chunks carried 7 tokens (speculative decoding)
    assert tpot_s(r) == pytest.approx(0.030 / 6)


def test_goodput_counts_requests_meeting_every_slo() -> None:
    fast = rec(0.0, [10, 20, 30], out=3)  # ttft 10, tpot 10
    slow_ttft = rec(0.0, [300, 310, 320], out=3)
    slow_tpot = rec(0.0, [10, 110, 210], out=3)  # tpot 100
    slo = Slo.parse(["ttft:100 tpot:50"])
    res = compute_metrics([fast, slow_ttft, slow_tpot], slo=slo)
    assert res["goodput"]["good"] == 1
    assert res["request_goodput"] == pytest.approx(1 / res["duration"])
    assert res["goodput"]["per_metric_met_fraction"] == {
        "ttft": pytest.approx(2 / 3),
        "tpot": pytest.approx(2 / 3),
    }


@pytest.mark.parametrize("bad", ["ttft", "foo:1", "ttft:x", "ttft:-1"])
def test_bad_goodput_items(bad: str) -> None:
    with pytest.raises(ValueError, match="goodput"):
        Slo.parse([bad])


def test_peak_concurrency_and_per_scenario() -> None:
    a = rec(0.0, [10], out=1, scenario="chat")  # ends at 11 ms
    b = rec(0.005, [10], out=1, scenario="json")
    c = rec(0.5, [10], out=1, scenario="json")
    assert peak_concurrency([a, b, c]) == 2
    per = per_scenario([a, b, c])
    assert set(per) == {"chat", "json"} and per["json"]["completed"] == 2


def test_open_loop_latency_from_intended_start() -> None:
    on_time = rec(10.0, [50, 60], out=2, t_intended=10.0)
    late = rec(12.0, [50, 60], out=2, t_intended=11.0)  # waited 1 s for a free slot
    res = compute_metrics([on_time, late], percentiles=(50, 99))
    arr = res["arrivals"]
    assert arr["scheduled"] == 2 and arr["sent"] == 2 and arr["late"] == 1
    assert arr["ttft_from_intended_ms"]["mean"] == pytest.approx((50 + 1050) / 2)
    assert res["mean_ttft_ms"] == pytest.approx(50)


def _requests_of_every_kind() -> list:
    return [
        rec(0.0, [50, 60, 70, 80], out=4),  # ttft 50, e2el 80, tpot 30/3 = 10, gaps 10 10 10
        rec(0.1, [20, 50], out=3),  # tpot 30/2 = 15 (usage tokens, not chunks), gap 30
        rec(0.2, [30], out=1),  # one token: no TPOT, no gap
        rec(0.3, [10, 40], out=None),  # no usage: no TPOT; gap 30
        rec(0.4, [10, 40], out=0),  # usage says 0: no TPOT; gap 30
        rec(0.5, [], out=None, error="http", status=500),  # failures, interrupted, dropped: no samples
        rec(0.6, [1, 2], out=2, error="inband_error"),
        rec(0.7, [5, 9], out=2, error="interrupted"),
        rec(0.8, [], out=None, error="dropped", t_intended=0.8),
        rec(0.9, [], out=None),  # no error but no output chunk either: not a success
    ]


def test_metric_arrays_by_hand() -> None:
    recs = _requests_of_every_kind()
    arr = metric_arrays(recs)
    assert arr["ttft"].tolist() == pytest.approx([0.050, 0.020, 0.030, 0.010, 0.010])
    assert arr["tpot"].tolist() == pytest.approx([0.010, 0.015])
    assert arr["itl"].tolist() == pytest.approx(
        [0.010, 0.010, 0.010, 0.030, 0.030, 0.030]
    )  # none across requests
    assert arr["e2el"].tolist() == pytest.approx([0.080, 0.050, 0.030, 0.040, 0.040])
    one = metric_arrays(recs, np.array([1]))
    want = {"ttft": [0.020], "tpot": [0.015], "e2el": [0.050], "itl": [0.030]}
    assert {k: v.tolist() for k, v in one.items()} == want
    empty = metric_arrays([])
    assert all(v.size == 0 for v in empty.values()) and set(empty) == set(M.METRICS)


def test_tpot_is_one_definition_live_and_in_results() -> None:
    """Workers' tpot_s per record and the results' TPOT samples pick the same requests and values."""
    recs = rand_records(500, 3, open_loop=True)
    live = [t for t in (tpot_s(r) for r in recs) if t is not None]
    assert len(live) > 100
    assert metric_arrays(recs)["tpot"].tolist() == live
    assert [tpot_s(r) for r in _requests_of_every_kind()] == pytest.approx(
        [0.010, 0.015, None, None, None, None, None, None, None, None]
    )


def test_duration_and_peak_concurrency_by_hand() -> None:
    a = rec(10.0, [100], out=1, end_us=500_000)  # in flight 10.0-10.5
    b = rec(10.2, [100], out=1, end_us=1_000_000)  # 10.2-11.2
    c = rec(10.5, [100], out=1, end_us=200_000)  # starts as `a` ends: ends count first
    failed = rec(10.3, [], out=None, error="http", status=500, end_us=100_000)  # 10.3-10.4: in flight too
    dropped = rec(20.0, [], out=None, error="dropped", end_us=0)  # never sent: no time, no concurrency
    assert M.duration_s([a, b, c, failed, dropped]) == pytest.approx(1.2)
    assert peak_concurrency([a, b, c, dropped]) == 2
    assert peak_concurrency([a, b, c, failed]) == 3
    assert M.duration_s([dropped]) == 0.0 and peak_concurrency([dropped]) == 0 and peak_concurrency([]) == 0


def test_peak_output_tokens_per_s_by_hand() -> None:
    r1 = rec(100.0, [100, 500, 1200, 1900], out=8)  # 2 tokens per chunk: 4 in second 0, 4 in second 1
    r2 = rec(100.6, [300, 500], out=None)  # no usage: 1 per chunk, at 0.9 s and 1.1 s
    r3 = rec(101.0, [200], out=6)  # 6 at 1.2 s
    failed = rec(99.5, [100], out=100, error="inband_error")  # neither tokens nor the clock's origin
    assert M.peak_output_tokens_per_s([r1, r2, r3, failed]) == pytest.approx(4 + 1 + 6)
    assert M.peak_output_tokens_per_s([r1, r2]) == pytest.approx(5)
    assert M.peak_output_tokens_per_s([r1, r2, r3], block=1) == pytest.approx(11)  # blocks add up
    assert M.peak_output_tokens_per_s([failed]) == 0.0 and M.peak_output_tokens_per_s([]) == 0.0


def test_stats_ms_by_hand() -> None:
    st = M.stats_ms(np.array([0.010, 0.020, 0.030, 0.040]), (50, 90, 99.9))
    assert list(st) == ["mean", "median", "std", "max", "p50", "p90", "p99.9"]
    assert st == pytest.approx(
        {
            "mean": 25,
            "median": 25,
            "std": math.sqrt(125),
            "max": 40,
            "p50": 25,
            "p90": 30 + 0.7 * 10,
            "p99.9": 30 + 0.997 * 10,
        }
    )
    assert M.stats_ms([], (50, 99)) == {
        "mean": 0.0,
        "median": 0.0,
        "std": 0.0,
        "max": 0.0,
        "p50": 0.0,
        "p99": 0.0,
    }


def _itl_stats(recs: list, percentiles: tuple[float, ...], **kw: int) -> dict[str, float]:
    c = columns_from_records(recs)
    ok = M.ok_rows(c, M.rows(c))
    return M.itl_stats(*M.ok_chunks(c, ok), percentiles, **kw)


@pytest.mark.parametrize("threshold", [0, 10**9])  # exact integer counts, and the float sort
def test_itl_stats_by_hand(monkeypatch: pytest.MonkeyPatch, threshold: int) -> None:
    monkeypatch.setattr(M, "ITL_COUNT_THRESHOLD", threshold)
    recs = [rec(0.0, [0, 10, 30], out=3), rec(0.0, [100, 140], out=2), rec(0.0, [7], out=1)]  # gaps 10 20 40
    st = _itl_stats(recs, (50, 99, 99.9))
    assert st == pytest.approx(
        {
            "mean": 70 / 3,
            "median": 20,
            "std": math.sqrt((13.333**2 + 3.333**2 + 16.667**2) / 3),
            "max": 40,
            "p50": 20,
            "p99": 20 + 0.98 * 20,
            "p99.9": 20 + 0.998 * 20,
        },
        rel=1e-4,
    )
    assert _itl_stats([rec(0.0, [7], out=1)], (50,)) == {
        "mean": 0.0,
        "median": 0.0,
        "std": 0.0,
        "max": 0.0,
        "p50": 0.0,
    }


def test_itl_counts_path_equals_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ITL_COUNT_THRESHOLD gaps the statistics come from integer counts: the same numbers as sorting."""
    pcts = (50, 90, 95, 99, 99.9)
    pools = [rand_records(600, 11)]
    pools += [[rec(1.0, [x / 1000 for x in range(0, 100 * (n + 1), 100 + n)], out=n)] for n in (1, 2, 3, 4)]
    for recs in pools:  # tiny pools: median/percentile index arithmetic
        ref = _itl_stats(recs, pcts)
        monkeypatch.setattr(M, "ITL_COUNT_THRESHOLD", 0)
        for block in (1, 7, 1 << 20):  # the counts are added block by block
            assert_same(ref, _itl_stats(recs, pcts, block=block))
        monkeypatch.undo()
    nonmonotone = [rec(0.0, [30, 10, 50], out=3)]  # a negative gap: counts cannot hold it, sorting does
    monkeypatch.setattr(M, "ITL_COUNT_THRESHOLD", 0)
    assert _itl_stats(nonmonotone, (50,)) == pytest.approx(
        {"mean": 10, "median": 10, "std": 30, "max": 40, "p50": 10}
    )


def test_plot_arrays_itl_is_cdf_sample() -> None:
    c = columns_from_records(rand_records(400, 5))
    full = metric_arrays(c)["itl"]
    sample = M.plot_arrays(c, max_sample=500, seed=0)["itl"]
    pick = np.random.default_rng(0).integers(0, full.size, 500)
    assert np.array_equal(sample, full[pick])
    small = M.plot_arrays(c, max_sample=10**9)
    assert all(np.array_equal(small[k], v) for k, v in metric_arrays(c).items())
