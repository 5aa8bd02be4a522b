"""The result's input-length check: a run whose prompts are more than 10 % off --input-len says so loudly."""

from __future__ import annotations

import pytest

from orchestration.report.summary import format_summary
from tests.unit.measure.helpers import rec
from vllm_users.measure.result_builder import INPUT_LEN_TOLERANCE, build_result


def _recs(actual: int, requested: int = 100, scenario: str = "chat") -> list:
    return [
        rec(float(i), [10, 20], out=2, prompt=actual, input_len=requested, scenario=scenario)
        for i in range(5)
    ]


def _meta(overhead: int | None, source: str = "usage") -> dict:
    return {"date": "d", "prompt_calibration": {"source": source, "overhead_tokens": overhead}}


def test_lengths_within_tolerance_pass_quietly() -> None:
    res = build_result(_recs(107), _meta(7))  # 100 text tokens + a 7-token chat template
    chk = res["input_len_check"]
    assert chk["ok"] and chk["actual_text_mean"] == 100 and chk["off_fraction"] == 0.0
    assert chk["server_overhead_tokens"] == 7 and chk["calibration"] == "usage"
    assert "warnings" not in res and "PROMPT LENGTHS OFF" not in format_summary(res)


@pytest.mark.parametrize(("actual", "overhead"), [(488, 0), (60, 7), (121, None)])
def test_lengths_off_are_loud_in_result_and_summary(actual: int, overhead: int | None) -> None:
    res = build_result(_recs(actual), _meta(overhead, "tokenize:llama.cpp (ratio)"))
    chk = res["input_len_check"]
    text = actual - (overhead or 0)
    assert not chk["ok"] and chk["off_fraction"] == pytest.approx((text - 100) / 100)
    assert abs(chk["off_fraction"]) > INPUT_LEN_TOLERANCE
    assert chk["message"] in res["warnings"] and chk["message"].startswith("PROMPT LENGTHS OFF")
    assert f"WARNING: {chk['message']}" in format_summary(res)
    assert "tokenize:llama.cpp (ratio)" in chk["message"]


def test_no_check_without_requested_lengths_or_outside_chat() -> None:
    assert "input_len_check" not in build_result(_recs(500, scenario="json"), _meta(0))  # schemas add tokens
    no_len = [rec(0.0, [10], out=1, prompt=50)]
    assert "input_len_check" not in build_result(no_len, _meta(0))
    # an old run (no calibration in its meta): the raw usage figures are compared
    res = build_result(_recs(105), {"date": "d"})
    assert res["input_len_check"]["ok"] and res["input_len_check"]["server_overhead_tokens"] is None
