"""The result fields (vllm_users.measure.result_fields) against hand-computed answers, every field and edge case."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.unit.measure.helpers import assert_same, rand_records, rec
from vllm_users.measure.columns import columns_from_records
from vllm_users.measure.metrics import METRICS, PercentileChoice, Slo
from vllm_users.measure.result_builder import build_result
from vllm_users.measure.result_fields import (
    arrival_stats,
    build_metrics,
    compute_metrics,
    per_scenario,
    timeseries,
    ttft_by_turn,
)

SLO = Slo.parse(["ttft:40 tpot:12 e2el:60"])
ALL = {
    "percentiles": (50, 90, 95, 99),
    "percentile_metrics": METRICS,
}  # every percentile field the tests check


def _stats(mean: float, median: float, std: float, p50: float, p90: float, p95: float, p99: float) -> dict:
    return {
        k: float(v)
        for k, v in zip(
            ("mean", "median", "std", "p50", "p90", "p95", "p99"),
            (mean, median, std, p50, p90, p95, p99),
            strict=True,
        )
    }


def _mixed() -> list:
    return [
        rec(0.0, [50, 60, 70, 80], out=4, prompt=10, cached_tokens=4, input_len=12, valid=True),
        rec(0.2, [], out=None, error="http", status=503, error_detail="HTTP 503: overloaded"),  # 0.200-0.205
        rec(0.3, [1], out=1, error="inband_error", valid=False, tokens_estimated=True),
        rec(0.4, [], out=None, error="http", status=500),
        rec(0.5, [20, 50], out=3, prompt=20, input_len=20, valid=False, tokens_estimated=True),  # 0.500-0.551
        rec(0.52, [5], out=None, error="interrupted"),  # 0.520-0.526: two in flight
        rec(1.0, [30], out=1, prompt=30, cached_tokens=0),  # ends at 1.031: the last completion
        rec(5.0, [], out=None, error="dropped", valid=True),  # never sent: in nothing but "dropped"
    ]


def test_every_result_field_by_hand() -> None:
    dur = 1.031
    lat = {  # successes: TTFT 50 20 30, TPOT 10 15 (the one-token request has none), ITL 10 10 10 30, E2EL 80 50 30
        "ttft": _stats(
            100 / 3,
            30,
            math.sqrt((50**2 + 20**2 + 30**2) / 3 - (100 / 3) ** 2),
            30,
            30 + 0.8 * 20,
            30 + 0.9 * 20,
            30 + 0.98 * 20,
        ),
        "tpot": _stats(12.5, 12.5, 2.5, 12.5, 10 + 0.9 * 5, 10 + 0.95 * 5, 10 + 0.99 * 5),
        "itl": _stats(15, 10, math.sqrt(75), 10, 10 + 0.7 * 20, 10 + 0.85 * 20, 10 + 0.97 * 20),
        "e2el": _stats(
            160 / 3,
            50,
            math.sqrt((80**2 + 50**2 + 30**2) / 3 - (160 / 3) ** 2),
            50,
            50 + 0.8 * 30,
            50 + 0.9 * 30,
            50 + 0.98 * 30,
        ),
    }
    want = {
        "duration": dur,  # first dispatch 0.0 to last completion 1.031 (the dropped one at 5.0 was never sent)
        "completed": 3,
        "failed": 3,  # two http, one in-band error; interrupted and dropped apart
        "total_input_tokens": 60,
        "total_output_tokens": 8,
        "request_throughput": 3 / dur,
        "request_goodput": 1 / dur,
        "output_throughput": 8 / dur,
        "total_token_throughput": 68 / dur,
        "max_output_tokens_per_s": 7.0,  # second 0: 4 chunks x 1 token + 2 chunks x 1.5 tokens
        "max_concurrent_requests": 2,
        "output_throughput_per_user": (1000 / 10 + 1000 / 15) / 2,  # the two TPOTs, 10 and 15 ms
        **{f"{k}_{m}_ms": v for m, st in lat.items() for k, v in st.items()},
        "goodput": {
            "slo_ms": {"ttft": 40.0, "tpot": 12.0, "e2el": 60.0},
            "good": 1,  # only the one-token request (undefined TPOT counts as met)
            "good_fraction": 1 / 3,
            "per_metric_met_fraction": {"ttft": 2 / 3, "tpot": 2 / 3, "e2el": 2 / 3},
        },
        "errors_by_kind": {"http": 2, "inband_error": 1},
        "http_errors_by_status": {"503": 1, "500": 1},
        "chunk_token_ratio": 7 / 8,
        "tokens_estimated_requests": 1,  # successes only
        "error_messages": [  # most frequent first, then in order of first occurrence
            {"kind": "http", "message": "HTTP 503: overloaded", "count": 1},
            {"kind": "inband_error", "message": None, "count": 1},
            {"kind": "http", "message": None, "count": 1},
        ],
        "prefix_cache_hit_rate": 4 / 40,  # over successes that report cached tokens
        "cached_tokens_reported": True,
        "validity_rate": 1 / 3,  # over sent requests with a verdict
        "input_len_requested_mean": 16.0,
        "input_len_actual_mean": 15.0,
        "arrivals": {"scheduled": 0, "sent": 7, "dropped": 1},
        "interrupted": 1,
    }
    assert_same(want, compute_metrics(_mixed(), slo=SLO, **ALL), rel=1e-9)
    no_slo = compute_metrics(_mixed())
    assert no_slo["request_goodput"] is None and "goodput" not in no_slo


def test_empty_and_degenerate_inputs() -> None:
    zeros = _stats(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    empty = compute_metrics([], slo=SLO, **ALL)
    assert (
        empty["completed"] == empty["failed"] == empty["interrupted"] == empty["max_concurrent_requests"] == 0
    )
    assert empty["duration"] == 1e-9 and empty["max_output_tokens_per_s"] == 0.0
    assert all(empty[f"{k}_{m}_ms"] == 0.0 for m in ("ttft", "tpot", "itl", "e2el") for k in zeros)
    assert (
        empty["goodput"]["good_fraction"] == 0.0
        and empty["goodput"]["per_metric_met_fraction"]["ttft"] == 0.0
    )
    assert empty["chunk_token_ratio"] is None and empty["validity_rate"] is None
    assert "output_throughput_per_user" not in empty  # no success, no TPOT: absent, like TPOT
    assert empty["prefix_cache_hit_rate"] is None and empty["cached_tokens_reported"] is False
    assert empty["arrivals"] == {"scheduled": 0, "sent": 0, "dropped": 0} and empty["errors_by_kind"] == {}
    assert per_scenario([]) == {} and ttft_by_turn([]) == {}
    assert timeseries([]) == {"t0": None, "bucket_s": 1.0, "t": []}

    only_fail = compute_metrics([rec(1.0, [], out=None, error="http", status=503)], slo=SLO)
    assert (only_fail["completed"], only_fail["failed"], only_fail["duration"]) == (
        0,
        1,
        pytest.approx(0.005),
    )
    assert only_fail["http_errors_by_status"] == {"503": 1} and only_fail["mean_ttft_ms"] == 0.0

    one_token = rec(1.0, [5], out=1)
    res = compute_metrics([one_token], slo=Slo.parse(["tpot:1"]), **ALL)
    assert res["mean_ttft_ms"] == res["p99_e2el_ms"] == pytest.approx(5)
    assert res["mean_tpot_ms"] == res["mean_itl_ms"] == 0.0  # no samples
    assert res["goodput"]["good"] == 1 and res["chunk_token_ratio"] == 1.0

    no_usage = compute_metrics([rec(1.0, [5, 15], out=None)])
    assert no_usage["total_output_tokens"] == 0 and no_usage["chunk_token_ratio"] is None
    assert no_usage["max_output_tokens_per_s"] == 2.0 and no_usage["mean_tpot_ms"] == 0.0

    dropped = rec(9.0, [], out=None, error="dropped", t_intended=9.0, scenario="-", end_us=0)
    res = compute_metrics([dropped], slo=SLO)
    assert (
        res["completed"] == res["failed"] == res["max_concurrent_requests"] == 0 and res["duration"] == 1e-9
    )
    assert (
        res["arrivals"]["scheduled"] == 1 and res["arrivals"]["dropped"] == 1 and res["arrivals"]["sent"] == 0
    )
    res = compute_metrics([dropped, one_token])
    assert res["duration"] == pytest.approx(0.006) and res["completed"] == 1


def test_per_scenario_on_the_common_duration() -> None:
    recs = [
        rec(0.0, [10, 20], out=2, scenario="chat"),  # ends 0.021
        rec(0.5, [30], out=1, scenario="json"),  # ends 0.531
        rec(1.0, [40, 60], out=5, scenario="json"),  # ends 1.061
        rec(1.2, [], out=None, error="dropped", scenario="-", end_us=0),
    ]
    per = per_scenario(recs)
    assert list(per) == ["-", "chat", "json"]  # every scenario of the records given, sorted
    assert all(p["duration"] == pytest.approx(1.061) for p in per.values())
    assert per["chat"]["completed"] == 1 and per["chat"]["mean_tpot_ms"] == pytest.approx(10)
    assert per["json"]["completed"] == 2 and per["json"]["request_throughput"] == pytest.approx(2 / 1.061)
    assert per["json"]["mean_ttft_ms"] == pytest.approx(35) and per["json"]["mean_tpot_ms"] == pytest.approx(
        5
    )
    assert per["json"]["max_output_tokens_per_s"] == pytest.approx(6)  # by the scenario's own first start
    assert per["-"]["completed"] == 0 and per["-"]["arrivals"]["dropped"] == 1
    overall, scen, turns, n_sent = build_metrics(recs)
    assert list(scen) == ["chat", "json"] and n_sent == 3 and turns == {}  # results: sent requests only
    assert_same(scen["json"], per["json"])
    assert overall["completed"] == 3 and overall["mean_ttft_ms"] == pytest.approx((10 + 30 + 40) / 3)


def test_ttft_by_turn_by_hand() -> None:
    recs = [
        rec(0.0, [10], out=1, turn=0, prompt=100, cached_tokens=0),
        rec(0.0, [30], out=1, turn=0, prompt=100, cached_tokens=None),
        rec(0.0, [20], out=1, turn=1, prompt=300, cached_tokens=200),
        rec(0.0, [], out=None, turn=1, error="http", status=500, prompt=1000),  # failures do not count
        rec(0.0, [90], out=1, turn=None),  # not multi-turn
    ]
    assert ttft_by_turn(recs) == {
        "0": {
            "count": 2,
            "ttft_ms": {"mean": 20, "median": 20, "std": 10, "max": 30, "p50": 20, "p99": 10 + 0.99 * 20},
            "mean_prompt_tokens": 100,
            "cached_fraction": 0.0,
        },
        "1": {
            "count": 1,
            "ttft_ms": {"mean": 20, "median": 20, "std": 0, "max": 20, "p50": 20, "p99": 20},
            "mean_prompt_tokens": 300,
            "cached_fraction": 2 / 3,
        },
    }


def test_ttft_by_turn_counts_sessions_of_several_requests_only() -> None:
    recs = [
        rec(0.0, [10], out=1, turn=0, session=4),  # a one-request session (chat): not a turn of anything
        rec(0.0, [20], out=1, turn=0, session=7),
        rec(0.1, [40], out=1, turn=1, session=7, scenario="tools-followup"),  # same session, other scenario
        rec(0.0, [30], out=1, turn=0, session=9),
        rec(0.0, [], out=None, turn=1, session=9, error="timeout"),  # a failed turn 1 still makes 9 a session
        rec(0.0, [60], out=1, turn=0),  # older records without a session count by their turn
    ]
    got = ttft_by_turn(recs)
    assert {k: v["count"] for k, v in got.items()} == {"0": 3, "1": 1}
    assert got["0"]["ttft_ms"]["mean"] == pytest.approx((20 + 30 + 60) / 3)
    assert got["1"]["ttft_ms"]["mean"] == 40
    assert ttft_by_turn([rec(0.0, [10], out=1, turn=0, session=s) for s in range(5)]) == {}


def test_timeseries_by_hand() -> None:
    recs = [
        rec(100.0, [200, 400], out=5, end_us=450_000),  # first token 100.2, done 100.45
        rec(100.3, [800], out=2, end_us=1_900_000),  # first token 101.1, done 102.2
        rec(100.9, [300], out=1, end_us=350_000),  # first token 101.2, done 101.25
        rec(101.4, [], out=None, error="http", status=500, end_us=200_000),  # failed at 101.6
        rec(103.0, [], out=None, error="dropped", end_us=0),  # never sent: not in any bucket
    ]
    assert_same(
        timeseries(recs),
        {
            "t0": 100.0,
            "bucket_s": 1.0,
            "t": [0.0, 1.0, 2.0],
            "completed_per_s": [1.0, 1.0, 1.0],
            "failed_per_s": [0.0, 1.0, 0.0],
            "output_tokens_per_s": [5.0, 1.0, 2.0],
            "inflight": [1, 2, 0],  # at 100.5, 101.5, 102.5
            "ttft_p50_ms": [200.0, 550.0, math.nan],
            "ttft_p99_ms": [200.0, 300 + 0.99 * 500, math.nan],
        },
        rel=1e-9,
    )
    two = timeseries(recs, bucket_s=2.0)
    assert two["t"] == [0.0, 2.0] and two["completed_per_s"] == [1.0, 0.5] and two["inflight"] == [2, 0]


def test_arrival_stats_by_hand() -> None:
    recs = [
        rec(10.0, [50, 60], out=2, t_intended=10.0),
        rec(11.005, [50, 60], out=2, t_intended=11.0),  # 5 ms behind: not late
        rec(12.0, [50, 60], out=2, t_intended=11.0),  # waited 1 s for a free slot
        rec(13.0, [], out=None, error="http", status=500, t_intended=12.98),  # sent 20 ms late, failed
        rec(14.0, [], out=None, error="dropped", t_intended=14.0),
        rec(15.0, [50], out=1),  # closed loop: not scheduled
    ]
    arr = arrival_stats(recs, percentiles=(50,))
    assert_same(
        arr,
        {
            "scheduled": 5,
            "sent": 4,
            "dropped": 1,
            "late": 2,
            "late_threshold_ms": 10.0,
            "schedule_lag_ms": {
                "mean": 1025 / 4,
                "median": 12.5,
                "std": math.sqrt((0**2 + 5**2 + 1000**2 + 20**2) / 4 - (1025 / 4) ** 2),
                "max": 1000.0,
                "p50": 12.5,
            },
            "ttft_from_intended_ms": {
                "mean": 385.0,
                "median": 55.0,  # 50, 55, 1050
                "std": math.sqrt((50**2 + 55**2 + 1050**2) / 3 - 385**2),
                "max": 1050.0,
                "p50": 55.0,
            },
            "e2el_from_intended_ms": {
                "mean": 395.0,
                "median": 65.0,  # 60, 65, 1060
                "std": math.sqrt((60**2 + 65**2 + 1060**2) / 3 - 395**2),
                "max": 1060.0,
                "p50": 65.0,
            },
        },
        rel=1e-6,
    )
    # the result's arrivals keep their own percentiles (with max), whatever --metric-percentiles says
    assert compute_metrics(recs, percentiles=(50,))["arrivals"] == arrival_stats(recs)
    assert arrival_stats(recs)["schedule_lag_ms"]["max"] == pytest.approx(1000.0)
    assert compute_metrics(recs)["mean_ttft_ms"] == pytest.approx(50)  # latency from the real start


def test_percentile_fields_as_vllm_bench_serve_names_them() -> None:
    recs = rand_records(300, 3, open_loop=False, scenarios=("chat", "json"))
    res = compute_metrics(recs)  # vLLM's defaults: --percentile-metrics ttft,tpot,itl --metric-percentiles 99
    pkeys = [k for k in res if k[0] == "p" and k[1].isdigit()]
    assert pkeys == ["p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms"]
    assert {"mean_e2el_ms", "median_e2el_ms", "std_e2el_ms"} <= set(res)  # means stay for every metric
    pc = PercentileChoice.parse("ttft,e2el", "50,90,99,99.9")
    res = compute_metrics(recs, percentiles=pc.percentiles, percentile_metrics=pc.metrics)
    pkeys = [k for k in res if k[0] == "p" and k[1].isdigit()]
    assert pkeys == [f"p{p}_{m}_ms" for m in ("ttft", "e2el") for p in ("50", "90", "99", "99.9")]
    ttft_ms = [r.chunk_times_us[0] / 1e3 for r in recs if r.error is None and r.chunk_times_us]
    assert res["p99.9_ttft_ms"] == pytest.approx(np.percentile(ttft_ms, 99.9))
    _overall, scen, _turns, _n = build_metrics(
        recs, percentiles=pc.percentiles, percentile_metrics=pc.metrics
    )
    assert all("p99.9_e2el_ms" in s and "p99_itl_ms" not in s for s in scen.values())
    meta = {"date": "d", "percentile_metrics": "itl", "metric_percentiles": "25,75"}
    built = build_result(recs, meta)  # the run's choice travels in its meta (result.json and `report` agree)
    assert [k for k in built if k[0] == "p" and k[1].isdigit()] == ["p25_itl_ms", "p75_itl_ms"]
    for bad in (("ttft,foo", "99"), ("ttft", "0"), ("ttft", "101"), ("ttft", "x")):
        with pytest.raises(ValueError, match="--"):
            PercentileChoice.parse(*bad)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_records_add_up(seed: int) -> None:
    """Counts partition the records, scenarios add up to the whole, statistics are those of the samples."""
    recs = rand_records(500, seed, open_loop=True, scenarios=("chat", "json", "tools"))
    res = compute_metrics(recs, slo=SLO)
    dropped = sum(r.error == "dropped" for r in recs)
    assert res["completed"] + res["failed"] + res["interrupted"] + dropped == len(recs)
    assert res["completed"] == sum(r.error is None and bool(r.chunk_times_us) for r in recs)
    assert sum(res["errors_by_kind"].values()) == res["failed"]
    _overall, scen, _turns, n_sent = build_metrics(recs, slo=SLO)
    assert n_sent == len(recs) - dropped
    for k in ("completed", "failed", "interrupted", "total_input_tokens", "total_output_tokens"):
        assert sum(s[k] for s in scen.values()) == res[k], k
    assert sum(s["goodput"]["good"] for s in scen.values()) == res["goodput"]["good"]
    ttft_ms = [r.chunk_times_us[0] / 1e3 for r in recs if r.error is None and r.chunk_times_us]
    assert res["mean_ttft_ms"] == pytest.approx(np.mean(ttft_ms))
    assert res["p99_ttft_ms"] == pytest.approx(np.percentile(ttft_ms, 99))
    meta = {"date": "d"}
    assert_same(build_result(recs, meta, slo=SLO), build_result(columns_from_records(recs), meta, slo=SLO))
