"""Locust's CSVs of a vllm-locust run: one STREAM row per scenario (E2EL, output tokens as content size)."""

from __future__ import annotations

import pytest

from orchestration.report.locust_csv import result_from_csv

HEADER = (
    "Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,"
    "Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,"
    "99.99%,100%\n"
)
ROWS = (
    "STREAM,chat,60,0,400,410.5,300,900,128.0,6.0,0.0,400,410,420,430,450,500,600,700,900,900,900\n"
    "STREAM,json,40,4,200,220.0,100,500,90.0,4.0,0.4,200,210,220,230,250,300,350,400,500,500,500\n"
    ",Aggregated,100,4,300,334.3,100,900,112.8,10.0,0.4,300,400,410,420,440,480,590,690,900,900,900\n"
)


def test_one_row_per_scenario_gives_counts_tokens_and_e2el(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "locust_stats.csv").write_text(HEADER + ROWS)
    out = result_from_csv(str(tmp_path), {})
    assert out is not None
    res, approximate, _, warnings = out
    assert res["completed"] == 96 and res["failed"] == 4 and res["num_prompts"] == 100
    assert res["total_output_tokens"] == 60 * 128 + 40 * 90  # content size = output tokens (0 for a failure)
    assert res["duration"] == pytest.approx(10.0)
    assert res["output_throughput"] == pytest.approx((60 * 128 + 40 * 90) / 10.0)
    assert res["mean_e2el_ms"] == pytest.approx((60 * 410.5 + 40 * 220.0) / 100)
    assert "ttft" not in "".join(k for k in res if k.endswith("_ms"))  # TTFT is no Locust request any more
    assert "output_throughput" in approximate
    assert not any("time-to-headers" in w for w in warnings)


def test_old_runs_with_ttft_rows_still_map(tmp_path) -> None:  # type: ignore[no-untyped-def]
    old = (
        ROWS.splitlines()[0]
        + "\n"
        + "TTFT,chat,60,0,40,41.0,30,90,0,6.0,0.0,40,41,42,43,45,50,60,70,90,90,90\n"
    )
    (tmp_path / "locust_stats.csv").write_text(HEADER + old)
    out = result_from_csv(str(tmp_path), {})
    assert out is not None
    res = out[0]
    assert res["completed"] == 60  # TTFT rows are not requests
    assert res["median_ttft_ms"] == 40 and res["median_e2el_ms"] == 400
