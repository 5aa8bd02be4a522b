"""Metric definitions against hand-computed answers (vLLM bench serve's conventions)."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_users.metrics import Slo, compute_metrics, peak_concurrency, per_scenario, tpot_s
from vllm_users.record import RequestRecord


def rec(t_start: float, chunks_ms: list[float], out: int | None, prompt: int = 10, **kw) -> RequestRecord:
    us = [round(c * 1000) for c in chunks_ms]
    return RequestRecord(
        scenario=kw.pop("scenario", "chat"), worker="w", user=0, seq=0, endpoint="chat", t_start=t_start,
        chunk_times_us=us, end_us=(us[-1] + 1000) if us else 5000, prompt_tokens=prompt, output_tokens=out, **kw,
    )  # fmt: skip


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
    assert res["goodput"]["per_metric_met_fraction"] == {"ttft": pytest.approx(2 / 3), "tpot": pytest.approx(2 / 3)}


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
