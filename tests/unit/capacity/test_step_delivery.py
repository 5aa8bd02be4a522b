"""A step's rates and verdict from the load it was given: its req/s and tok/s over the steady interior (a sweep's
table, plot and cost read them), and an open-loop step short of its offered rate fails as "not delivered";
the summary states the offered and the achieved rate and the gate flags a side that was not delivered."""

from __future__ import annotations

import os

import pytest

from orchestration.capacity.steps import summarize_step, with_delivery
from orchestration.gate.rules import parse_rules
from orchestration.gate.samples import load_side
from orchestration.gate.verdict import gate
from orchestration.report.summary import format_summary
from tests.unit.measure.test_delivered import CAPACITY, open_loop
from tests.unit.report.helpers import write_run
from vllm_users.measure import metric_keys as K
from vllm_users.measure.run_result import load_result

OPEN = {"loop": "open", "request_rate": 20}


def _step(tmp_path: object, name: str, rate: float, n: int = 300, cap: int = 0) -> dict:  # type: ignore[type-arg]
    d = write_run(os.path.join(str(tmp_path), name), open_loop(rate, n, cap=cap), meta=OPEN)
    return summarize_step(name, "rate", rate, d, 0)


def test_a_steps_rate_is_its_steady_interior(tmp_path) -> None:
    """The whole-run figure counts the ramp and the drain: at 0.9 x capacity it read low; the step's row reads
    the interior, at the offered rate."""
    s = _step(tmp_path, "held", 0.9 * CAPACITY, n=120)
    res = load_result(s["run_dir"])
    assert res is not None
    whole = res.to_json()[K.REQUEST_THROUGHPUT]
    steady = res.to_json()[K.DELIVERY]
    # held: its rate is the target (the headline a search prices), its tok/s the interior's per request
    assert s["achieved_rate"] == pytest.approx(0.9 * CAPACITY) == s[K.REQUEST_THROUGHPUT]
    per_request = steady[K.OUTPUT_THROUGHPUT] / steady["achieved_rate"]
    assert s[K.OUTPUT_THROUGHPUT] == pytest.approx(per_request * s["achieved_rate"])
    assert whole < 0.95 * s["achieved_rate"]  # ramp and drain in the whole-run window
    assert s["not_delivered"] is None
    v = {"passed": True, "reasons": []}
    assert with_delivery(s, v) is v


def test_a_step_short_of_its_rate_fails_as_not_delivered(tmp_path) -> None:
    s = _step(tmp_path, "short", 1.6 * CAPACITY, cap=64)
    assert s["not_delivered"] and "not delivered" in s["not_delivered"]
    assert s["achieved_rate"] == pytest.approx(CAPACITY, rel=0.15)  # the target x the fraction kept up with
    v = with_delivery(s, {"passed": True, "reasons": []})
    assert v["passed"] is False and v["not_delivered"] is True and v["reasons"] == [s["not_delivered"]]


def test_the_summary_states_offered_achieved_and_the_shortfall(tmp_path) -> None:
    ok = load_result(_step(tmp_path, "ok", 0.5 * CAPACITY)["run_dir"])
    short = load_result(_step(tmp_path, "short", 1.6 * CAPACITY, cap=64)["run_dir"])
    assert ok is not None and short is not None
    text = format_summary(ok.to_json())
    assert "Offered / achieved req/s (interior):" in text and "NOT DELIVERED" not in text
    text = format_summary(short.to_json())
    assert "NOT DELIVERED" in text
    assert any(w.startswith("Load achieved") and "not delivered" in w for w in short.warnings)


def test_the_gate_flags_a_side_that_was_not_delivered(tmp_path) -> None:
    base = _step(tmp_path, "base", 0.5 * CAPACITY)["run_dir"]
    short = _step(tmp_path, "short", 1.6 * CAPACITY, cap=64)["run_dir"]
    same = _step(tmp_path, "same", 0.5 * CAPACITY)["run_dir"]
    rules = parse_rules(["p99_ttft_ms:20%"])
    assert "NOT DELIVERED" not in gate(load_side(base), load_side(same), rules).headline()
    report = gate(load_side(base), load_side(short), rules)
    assert "LOAD NOT DELIVERED: candidate short" in report.headline()
    assert report.to_dict()["load_not_delivered"] == report.load_notes


def test_a_repeated_steps_rate_is_its_repeats_interior_mean(tmp_path) -> None:
    import json

    step = os.path.join(str(tmp_path), "step")
    rates = []
    for i, seed in enumerate((1, 2), 1):
        d = write_run(
            os.path.join(step, f"repeat-0{i}"), open_loop(0.9 * CAPACITY, 120, seed=seed), meta=OPEN
        )
        res = load_result(d)
        assert res is not None
        rates.append(res.to_json()[K.DELIVERY]["achieved_rate"])
    one = {"mean": 1.0, "n": 2, "ci_low": 0.9, "ci_high": 1.1}
    doc = {"runs": ["repeat-01", "repeat-02"], "metrics": {K.REQUEST_THROUGHPUT: one}}
    with open(os.path.join(step, "repeats.json"), "w") as fh:
        json.dump(doc, fh)
    s = summarize_step("step", "rate", None, step, 0)  # no target: the interior's own rate
    assert s["achieved_rate"] == pytest.approx(sum(rates) / 2) and s["not_delivered"] is None


def test_the_report_says_the_shortfall(tmp_path) -> None:
    from orchestration.report.postprocess import load_run

    short = _step(tmp_path, "short", 1.6 * CAPACITY, cap=64)["run_dir"]
    ok = _step(tmp_path, "ok", 0.5 * CAPACITY)["run_dir"]
    assert any("not delivered" in w for w in load_run(short).warnings)
    assert not any("not delivered" in w for w in load_run(ok).warnings)
