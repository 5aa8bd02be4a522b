"""result.json's `replay` of a --trace run: lag from the intended start, sent vs the trace, reuse vs hits; and
the summary's lines of it."""

from __future__ import annotations

import numpy as np
import pytest

from orchestration.report.summary import format_summary, replay_lines
from vllm_users.measure.record import RequestRecord, dropped_record
from vllm_users.measure.replay_fidelity import replay_fidelity, server_hit_rate
from vllm_users.measure.run_result import RunResult
from vllm_users.measure.server_counters import LoadCounters

ABOUT = {"trace": "t.jsonl", "format": "mooncake", "time_scale": 2.0}


def _rec(seq: int, lag_ms: float | None, error: str | None = None) -> RequestRecord:
    t = 1000.0 + seq
    return RequestRecord(
        scenario="trace",
        worker="w0",
        user=1,
        seq=seq,
        endpoint="chat",
        t_start=t + (lag_ms or 0.0) / 1000.0,
        t_intended=None if lag_ms is None else t,
        chunk_times_us=[1000, 2000],
        end_us=2500,
        error=error,
    )


def test_lag_is_send_time_less_intended_time_of_the_scheduled_requests() -> None:
    lags = [float(x) for x in range(1, 101)]  # 1..100 ms
    recs = [_rec(i, lag) for i, lag in enumerate(lags)]
    recs += [_rec(200, None), _rec(201, None, error="http")]  # a session's later turns: no intended time
    recs.append(dropped_record("w0", 300, 5000.0))
    rep = replay_fidelity(
        recs, trace=ABOUT, trace_requests=104, scheduled=101, expected_reuse=0.5, hit_rate=0.47
    )
    assert rep["lag_ms"]["p50"] == pytest.approx(np.percentile(lags, 50), abs=1e-3)
    assert rep["lag_ms"]["p99"] == pytest.approx(np.percentile(lags, 99), abs=1e-3)
    assert rep["lag_ms"]["max"] == pytest.approx(100.0, abs=1e-3)
    assert (rep["sent"], rep["dropped"], rep["not_sent"], rep["all_sent"]) == (102, 1, 2, False)
    assert rep["reuse_gap_points"] == pytest.approx(-3.0)
    assert rep["format"] == "mooncake" and rep["time_scale"] == 2.0


def test_what_does_not_apply_is_absent_never_zero() -> None:
    rep = replay_fidelity(
        [dropped_record("w0", 1, 5.0)],
        trace=ABOUT,
        trace_requests=1,
        scheduled=1,
        expected_reuse=None,
        hit_rate=None,
    )
    assert rep["lag_ms"] is None and rep["reuse_gap_points"] is None and rep["sent"] == 0
    assert server_hit_rate(None) is None
    assert server_hit_rate(LoadCounters("u", {}, {"vllm:prefix_cache_queries_total": 0.0})) is None
    c = LoadCounters(
        "u",
        {"vllm:prefix_cache_hits_total": 100.0, "vllm:prefix_cache_queries_total": 1000.0},
        {"vllm:prefix_cache_hits_total": 700.0, "vllm:prefix_cache_queries_total": 2000.0},
    )
    assert server_hit_rate(c) == pytest.approx(0.6)


def test_the_result_keeps_it_and_the_summary_prints_it() -> None:
    rep = replay_fidelity(
        [_rec(0, 2.0), _rec(1, 4.0)],
        trace=ABOUT,
        trace_requests=2,
        scheduled=2,
        expected_reuse=0.5,
        hit_rate=0.48,
    )
    res = RunResult(
        date="d",
        backend="b",
        model_id="m",
        tokenizer_id=None,
        num_prompts=2,
        request_rate="inf",
        burstiness=1.0,
        max_concurrency=None,
        metrics={"completed": 2, "failed": 0},
        replay=rep,
    )
    doc = res.to_json()
    assert doc["replay"] == rep and RunResult.from_json(doc).to_json() == doc
    text = "\n".join(replay_lines(doc["replay"]))
    assert "2 / 2 / 0" in text and "3.00 / 3.98" in text and "50.0% / 48.0%" in text and "x2" in text
    assert "Replay fidelity" in format_summary(doc)
    assert "Replay fidelity" not in format_summary({**doc, "replay": None}) and replay_lines(None) == []
