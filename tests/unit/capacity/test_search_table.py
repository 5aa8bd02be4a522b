"""find-max-rate's console answer: the maximum first, then one table of steps with no column that is all n/a."""

from __future__ import annotations

from orchestration.capacity.search_table import format_search, step_cells


def _doc(**over: object) -> dict:  # type: ignore[type-arg]
    steps = [
        {"verdict": "probe", "target": None, "completed": 200, "requests": 200, "ttft_p99_ms": 812.0},
        {
            "verdict": "fails",
            "target": 7.2,
            "completed": 70,
            "requests": 72,
            "judgement": {
                "reasons": ["p99 TTFT 640.0 ms > 500 ms", "TTFT rising: median 40.0 ms in the first third"],
                "slo_values_ms": {"ttft": 640.0},
                "on_schedule": 0.986,
            },
        },
        {
            "verdict": "holds",
            "target": 5.565,
            "completed": 56,
            "requests": 56,
            "judgement": {"reasons": [], "slo_values_ms": {"ttft": 56.6}, "on_schedule": 0.964},
        },
    ]
    doc = {
        "kind": "max_rate_search",
        "slo_ms": {"ttft": 500.0},
        "slo_percentile": 99.0,
        "max_error_rate": 0.01,
        "max_rate": 5.565,
        "lowest_failing_rate": 7.2,
        "steps": steps,
    }
    doc.update(over)
    return doc


def test_the_answer_comes_first_then_one_table_of_steps() -> None:
    text = format_search(_doc(), "/runs/s")
    lines = text.splitlines()
    assert lines[0].startswith("vllm-locust: Max rate within the SLO") and "5.565 req/s" in lines[0]
    at = lines.index("=== find-max-rate steps ===")
    assert lines[at + 1].split() == [
        "rate",
        "req/s",
        "completed",
        "on",
        "schedule",
        "TTFT",
        "p99",
        "ms",
        "verdict",
    ]
    probe, fails, holds = lines[at + 2 : at + 5]
    assert probe.split() == ["probe", "200/200", "-", "812.0", "probe"]
    assert fails.split()[:4] == ["7.2", "70/72", "99%", "640.0"]
    assert fails.endswith("fails: p99 TTFT 640.0 ms > 500 ms; TTFT rising: median 40.0 ms in the first third")
    assert holds.split() == ["5.565", "56/56", "96%", "56.6", "holds"]
    assert lines[-1].startswith("Steps: /runs/s/sweep.json")


def test_no_column_without_a_number() -> None:
    # no step measured TPOT (the SLO is TTFT only and no row has tpot_p99_ms): no TPOT column, never a 0
    header, rows = step_cells(_doc())
    assert not any("TPOT" in h for h in header) and all(len(r) == len(header) for r in rows)
    # a TPOT value in one step brings the column back, "-" where a step lacks it
    doc = _doc()
    doc["steps"][2]["judgement"]["slo_values_ms"]["tpot"] = 41.25
    header, rows = step_cells(doc)
    i = header.index("TPOT p99 ms")
    assert [r[i] for r in rows] == ["-", "-", "41.2"]
    # the SLO percentile names the columns
    header, _ = step_cells(_doc(slo_percentile=90.0))
    assert "TTFT p90 ms" in header


def test_the_bracket_is_the_resolution_and_the_range_the_uncertainty() -> None:
    rng = {"low": 4.61, "high": 7.9, "confidence": 0.999}
    lines = format_search(_doc(range=rng), "/runs/s").splitlines()
    assert "(search resolution: held at 5.565, failed at 7.2, [5.565, 7.2) +29.4%; 3 steps)" in lines[0]
    assert lines[1].startswith("vllm-locust: Range a second search lands in: [4.61, 7.9) req/s")
    open_low = format_search(_doc(range={**rng, "low": None}), "/runs/s").splitlines()[1]
    assert "[not pinned (too few steps below), 7.9)" in open_low
    assert "Range" not in format_search(_doc(), "/runs/s")  # no range computed: none said


def test_a_verdict_within_the_percentiles_noise_says_so() -> None:
    doc = _doc()
    doc["steps"][2]["judgement"]["slo_ci_ms"] = {"ttft": {"low": 40.0, "high": 520.0, "side": "straddles"}}
    holds = format_search(doc, "/runs/s").splitlines()[-2]
    assert holds.endswith("holds (within the SLO percentile's noise)")
