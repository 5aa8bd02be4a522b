"""TTFA, reasoning/answer tokens and TPOTs, and non-streamed runs in the result fields."""

from __future__ import annotations

import math

import pytest

from orchestration.report.summary import format_summary
from tests.unit.measure.helpers import rec
from vllm_users.measure.columns import columns_from_records, pack_records
from vllm_users.measure.records_store import load_columns
from vllm_users.measure.result_fields import compute_metrics, per_scenario

ALL = {"percentiles": (50, 99), "percentile_metrics": ("ttft", "tpot", "itl", "e2el")}


def _reasoning() -> list:
    return [  # TTFT 10 / TTFA 40 / E2EL 60: 3 reasoning tokens, 3 answer tokens
        rec(
            0.0,
            [10, 20, 30, 40, 50, 60],
            out=6,
            answer_us=40_000,
            reasoning_tokens=3,
            reasoning_estimated=False,
        ),
        # TTFT 20 / TTFA 100 / E2EL 140: 4 reasoning (counted), 5 answer tokens
        rec(
            0.1,
            [20, 40, 60, 80, 100, 110, 120, 130, 140],
            out=9,
            answer_us=100_000,
            reasoning_tokens=4,
            reasoning_estimated=True,
        ),
        rec(0.2, [5, 15], out=2, reasoning_tokens=2, reasoning_estimated=True),  # thought to the end: no TTFA
        rec(0.3, [10], out=None, error="http", status=500),
    ]


def test_ttfa_reasoning_and_answer_tpot_by_hand() -> None:
    res = compute_metrics(_reasoning(), **ALL)
    assert res["mean_ttfa_ms"] == pytest.approx(70) and res["median_ttfa_ms"] == pytest.approx(70)
    assert res["std_ttfa_ms"] == pytest.approx(30) and res["p99_ttfa_ms"] == pytest.approx(40 + 0.99 * 60)
    assert res["p50_ttfa_ms"] == pytest.approx(70)
    # reasoning TPOT = (TTFA - TTFT) / reasoning tokens: 30/3 = 10, 80/4 = 20
    assert res["mean_reasoning_tpot_ms"] == pytest.approx(15) and res[
        "std_reasoning_tpot_ms"
    ] == pytest.approx(5)
    # answer TPOT = (E2EL - TTFA) / (answer tokens - 1): 20/2 = 10, 40/4 = 10
    assert res["mean_answer_tpot_ms"] == pytest.approx(10) and res["median_answer_tpot_ms"] == pytest.approx(
        10
    )
    assert res["total_reasoning_tokens"] == 9 and res["total_answer_tokens"] == 17 - 9
    assert res["reasoning_requests"] == 3 and res["reasoning_tokens_estimated_requests"] == 2
    assert res["mean_ttft_ms"] == pytest.approx((10 + 20 + 5) / 3)  # TTFT: any output, unchanged
    text = format_summary(res)
    assert "Time to First Answer Token" in text and "Mean TTFA (ms):" in text and "Reasoning tokens" in text
    assert "P99 TPOT (ms):" in text and "P99 Answer TPOT (ms):" in text and "P50_" not in text


def test_without_reasoning_there_is_no_reasoning_field() -> None:
    res = compute_metrics([rec(0.0, [10, 20], out=2), rec(0.1, [10, 30], out=2)], **ALL)
    assert not [k for k in res if "ttfa" in k or "reasoning" in k or "answer" in k or "streamed" in k]
    assert "TTFA" not in format_summary(res) and "not streamed" not in format_summary(res)


def test_non_streamed_run_has_e2el_and_no_ttft_itl_tpot() -> None:
    recs = [
        rec(0.0, [80], out=8, not_streamed=True, end_us=80_000),
        rec(0.1, [60], out=6, not_streamed=True),
        rec(0.2, [], out=None, error="http", status=500),
    ]
    res = compute_metrics(recs, **ALL)
    assert not [k for k in res if "_ttft_" in k or "_tpot_" in k or "_itl_" in k]
    assert res["mean_e2el_ms"] == pytest.approx(70) and res["p99_e2el_ms"] == pytest.approx(60 + 0.99 * 20)
    assert res["not_streamed_requests"] == 2 and res["total_output_tokens"] == 14 and res["completed"] == 2
    text = format_summary(res)
    assert "not streamed: no TTFT/ITL" in text and "Mean TTFT" not in text and "Mean E2EL (ms):" in text
    per = per_scenario(recs, **ALL)
    assert "mean_ttft_ms" not in per["chat"]


def test_per_scenario_mix_of_streamed_and_not() -> None:
    recs = [
        rec(0.0, [50], out=5, not_streamed=True, scenario="json"),
        rec(0.0, [10, 20], out=2, scenario="chat"),
    ]
    per = per_scenario(recs, **ALL)
    assert "mean_ttft_ms" not in per["json"] and per["chat"]["mean_ttft_ms"] == pytest.approx(10)
    overall = compute_metrics(recs, **ALL)
    assert overall["mean_ttft_ms"] == pytest.approx(10) and overall["mean_e2el_ms"] == pytest.approx(35)
    assert "Per scenario" in format_summary({**overall, "per_scenario": per})


def test_new_columns_round_trip_and_older_frames_read_as_none(tmp_path) -> None:
    c = columns_from_records(_reasoning())
    assert c.a["answer_us"].tolist() == [40_000, 100_000, -1, -1]
    assert c.a["reasoning_tokens"].tolist() == [3, 4, 2, -1]
    assert c.a["reasoning_estimated"].tolist() == [False, True, True, False]
    assert not c.a["not_streamed"].any()
    from vllm_users.measure import columns as cols

    old = dict(cols.NUMERIC)
    try:  # a frame written before these columns existed
        for k in ("answer_us", "reasoning_tokens"):
            del cols.NUMERIC[k]
        flags, cols.FLAGS = cols.FLAGS, ()
        payload = pack_records(_reasoning())
    finally:
        cols.NUMERIC.clear()
        cols.NUMERIC.update(old)
        cols.FLAGS = flags
    (tmp_path / "records.cols").write_bytes(cols.frame(payload, 0))
    (tmp_path / "records.jsonl").write_bytes(b"")
    back = load_columns(str(tmp_path))
    assert back.a["answer_us"].tolist() == [-1] * 4 and not back.a["reasoning_estimated"].any()
    assert not math.isnan(compute_metrics(back)["mean_ttft_ms"])


def test_report_shows_ttfa_rows_only_when_a_run_has_them() -> None:
    from types import SimpleNamespace

    from orchestration.report.model import Report

    reasoning = SimpleNamespace(result=compute_metrics(_reasoning(), **ALL))
    plain = SimpleNamespace(result=compute_metrics([rec(0.0, [10, 20], out=2)], **ALL))
    keys = [k for k, _label, _v in Report([reasoning, plain], [], None).summary_rows()]  # type: ignore[list-item]
    assert "median_ttfa_ms" in keys and "p99_ttfa_ms" in keys and "mean_answer_tpot_ms" in keys
    assert "total_reasoning_tokens" in keys
    keys = [k for k, _label, _v in Report([plain], [], None).summary_rows()]  # type: ignore[list-item]
    assert not [k for k in keys if "ttfa" in k or "reasoning" in k]
