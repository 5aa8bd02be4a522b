"""result.json's `sessions`: sessions completed, cut (the run ended while open) and failed, against the
calls each session makes; calls per session and completed sessions' durations by hand; the summary's lines."""

from __future__ import annotations

from typing import Any

import pytest

from orchestration.report.summary import replay_lines
from orchestration.report.summary_groups import session_lines
from vllm_users.measure.record import RequestRecord
from vllm_users.measure.session_metrics import session_metrics


def _rec(session: int, turn: int, start: float, end_s: float, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        scenario="trace",
        worker="w0",
        user=1,
        seq=session * 100 + turn,
        endpoint="chat",
        t_start=1000.0 + start,
        chunk_times_us=[] if error else [1000, int(end_s * 1e6)],
        end_us=int(end_s * 1e6),
        error=error,
        session=session,
        turn=turn,
    )


RECORDS = [
    # session 0: 3 calls, all answered: from 0 s to 2.0 + 1.5 s
    _rec(0, 0, 0.0, 1.0),
    _rec(0, 1, 1.0, 0.5),
    _rec(0, 2, 2.0, 1.5),
    # session 4: 2 calls, all answered: 10 s to 10.5 + 0.5 s
    _rec(4, 0, 10.0, 0.4),
    _rec(4, 1, 10.5, 0.5),
    # session 7: 3 calls, the run ended while its second was in flight: cut, its first call still counts
    _rec(7, 0, 20.0, 1.0),
    _rec(7, 1, 21.0, 0.2, error="interrupted"),
    # session 9: 2 calls, its first failed: failed
    _rec(9, 0, 30.0, 0.1, error="http"),
    # session 12 (a one-request entry): no session of the trace
    _rec(12, 0, 40.0, 0.3),
]
EXPECTED = {0: 3, 4: 2, 7: 3, 9: 2, 11: 4}  # session 11 never started


def test_completed_cut_failed_and_not_started_by_hand() -> None:
    s = session_metrics(RECORDS, EXPECTED)
    assert s is not None
    assert (s["sessions"], s["completed"], s["cut"], s["failed"], s["not_started"]) == (5, 2, 1, 1, 1)
    # calls sent per started session: 3, 2, 2, 1
    assert s["calls_per_session"] == {"mean": pytest.approx(2.0), "p50": 2.0, "max": 3}
    d = s["duration_s"]  # the completed sessions only: 3.5 s and 1.0 s
    assert d["max"] == pytest.approx(3.5) and d["mean"] == pytest.approx(2.25)
    assert d["p50"] == pytest.approx(2.25) and d["p99"] == pytest.approx(1.0 + 2.5 * 0.99)


def test_a_session_that_the_run_cut_before_its_later_calls_is_cut_not_failed() -> None:
    s = session_metrics([_rec(3, 0, 0.0, 1.0)], {3: 4})
    assert s is not None and (s["completed"], s["cut"], s["failed"], s["duration_s"]) == (0, 1, 0, None)


def test_no_sessions_no_block_and_the_summary_s_lines() -> None:
    assert session_metrics(RECORDS, {}) is None
    rep = {
        "trace": "g.jsonl",
        "format": "graph",
        "trace_requests": 9,
        "sent": 9,
        "not_sent": 0,
        "lag_ms": None,
    }
    assert not any("Sessions" in line for line in replay_lines(rep)) and session_lines(None) == []
    lines = session_lines(session_metrics(RECORDS, EXPECTED))
    text = "\n".join(lines)
    assert "Sessions completed / cut / failed:" in text and "2 / 1 / 1 of 5" in text
    assert "Calls per session mean / max:" in text and "2.0 / 3" in text
    assert "Session duration p50 / p99 (s):" in text and "2.25 / 3.48" in text


def _turn(p50: float, cached: float | None) -> dict[str, Any]:
    return {"count": 1, "ttft_ms": {"p50": p50}, "mean_prompt_tokens": 10.0, "cached_fraction": cached}


def test_the_summary_s_ttft_by_turn_shows_the_first_turns_and_the_last() -> None:
    from orchestration.report.summary_groups import turn_lines

    assert turn_lines(None) == [] and turn_lines({}) == []
    few = turn_lines({"1": _turn(20.0, 0.5), "0": _turn(50.0, 0.0)}, cached_reported=True)
    assert few[0].endswith("0: 50.0 1: 20.0") and few[1].endswith("0: 0% 1: 50%")
    many = {str(k): _turn(float(k), 0.9) for k in range(20)}
    ttft = turn_lines(many)
    assert len(ttft) == 1  # no cached tokens reported: no share, not 0 %
    assert ttft[0].endswith("0: 0.0 1: 1.0 2: 2.0 3: 3.0 4: 4.0 ... 19: 19.0")
