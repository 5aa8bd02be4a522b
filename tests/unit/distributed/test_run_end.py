"""The end of a run that completed no request: a failure with a one-line reason, and a summary
that prints no latency of requests that never were; the calibration's warning reaches the result."""

from __future__ import annotations

from typing import Any

from orchestration.report.summary import format_summary
from tests.unit.measure.helpers import rec
from vllm_users import exit_codes
from vllm_users.distributed.run_end import exit_code_of
from vllm_users.distributed.transport.master_side import Collector
from vllm_users.measure.record import dropped_record
from vllm_users.measure.result_builder import build_run_result
from vllm_users.measure.result_notes import calibration_warning, no_completed_reason
from vllm_users.options import Options


def _failed(n: int) -> list[Any]:
    return [
        rec(float(i), [10, 20], out=2, error="truncated", error_detail="closed mid-stream") for i in range(n)
    ]


def test_a_run_that_sent_nothing_is_a_failure_with_its_reason(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = build_run_result([], {"date": "d"})
    c = Collector(str(tmp_path))
    try:
        assert exit_code_of(res, Options().measure, c, exit_codes.OK) == exit_codes.NOTHING_MEASURED
    finally:
        c.close()
    reason = no_completed_reason(res)
    assert reason is not None and reason.startswith("no request completed") and "\n" not in reason
    # nothing recorded, and nobody else counted: that nothing was sent is not known
    assert "no load request was recorded" in reason and "was sent" not in reason
    # the server's count over the load says none reached it: now it is known
    sent_none = no_completed_reason(res.replace(server_served=3, missing_vs_server=0))
    assert sent_none is not None and "no load request was sent" in sent_none
    assert exit_codes.NOTHING_MEASURED in exit_codes.DESCRIPTIONS


def test_nothing_recorded_but_served_never_says_none_was_sent() -> None:
    res = build_run_result([], {"date": "d"})
    served = no_completed_reason(res.replace(server_served=21, missing_vs_server=20))
    assert served is not None and "was sent" not in served
    assert "the server served 20" in served
    lost = {"workers_lost": [{"worker": "w0"}], "complete": False}
    gone = no_completed_reason(res.replace(data_loss=lost))
    assert gone is not None and "was sent" not in gone and "w0" in gone


def test_arrivals_all_dropped_are_named() -> None:
    recs = [dropped_record("w", i, 1_700_000_000.0 + i) for i in range(4)]
    reason = no_completed_reason(build_run_result(recs, {"date": "d"}))
    assert reason is not None and "all 4 scheduled arrivals were dropped" in reason, reason


def test_a_run_whose_requests_all_failed_says_so_and_keeps_code_1(tmp_path) -> None:  # type: ignore[no-untyped-def]
    res = build_run_result(_failed(10), {"date": "d"})
    c = Collector(str(tmp_path))
    try:
        assert exit_code_of(res, Options().measure, c, exit_codes.OK) == exit_codes.FAILURES
    finally:
        c.close()
    reason = no_completed_reason(res)
    assert reason is not None and "all 10 failed" in reason and "truncated=10" in reason


def test_a_run_with_successes_has_no_such_reason() -> None:
    assert no_completed_reason(build_run_result([rec(0.0, [10, 20], out=2)], {"date": "d"})) is None


def test_the_summary_prints_no_latency_for_no_request() -> None:
    doc = build_run_result([], {"date": "d"}).to_json()
    text = format_summary(doc)
    assert "TTFT (ms):" not in text and "0.00" not in text, text
    assert "No request completed" in text
    text = format_summary(build_run_result(_failed(3), {"date": "d"}).to_json())
    assert "Mean TTFT (ms):" not in text and "Failed requests:" in text


def test_the_calibration_warning_reaches_the_result() -> None:
    meta = {
        "prompt_calibration": {
            "source": "words (rejected: ...)",
            "warning": "PROMPT-LENGTH CALIBRATION REJECTED",
        }
    }
    assert calibration_warning(meta) == "PROMPT-LENGTH CALIBRATION REJECTED"
    assert calibration_warning({"prompt_calibration": {"source": "usage"}}) is None
    assert calibration_warning({}) is None
