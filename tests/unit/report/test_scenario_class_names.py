"""A traffic class may bear a scenario's name (`--class chat:...` in a run of the `chat` scenario, as the docs' own
example does): everything the console prints says which of the two a figure belongs to."""

from __future__ import annotations

from orchestration.report.summary import format_summary, progress_line
from tests.unit.measure.helpers import rec
from vllm_users.measure.result_builder import build_run_result

T0 = 1_700_000_000.0


def test_the_progress_line_labels_each_scenarios_figures() -> None:
    p = {
        "elapsed_s": 2.5,
        "ok": 27,
        "failed": 0,
        "inflight": 8,
        "output_tok_per_s": 812.4,
        "chat_tpot_p50_ms": 3.0,  # the master writes them as its histograms sort: TPOT first
        "chat_tpot_p99_ms": 4.25,
        "chat_ttft_p50_ms": 12.14,
        "chat_ttft_p99_ms": 40.33,
        "multi-turn_ttft_p50_ms": 7.0,
        "multi-turn_ttft_p99_ms": 9.0,
    }
    line = progress_line(p, 200)
    assert "scenario chat TTFT p50/p99 12.1/40.3ms TPOT p50/p99 3.0/4.2ms" in line, line
    assert "scenario multi-turn TTFT p50/p99 7.0/9.0ms" in line, line
    assert "chat_ttft" not in line and "chat " not in line.replace("scenario chat ", "")


def test_the_summary_keeps_scenario_and_class_apart() -> None:
    """Scenarios chat and json; classes chat (the json users' requests, fast) and batch (slow): the per-scenario
    rows say `scenario chat`, the class table's `chat` row sits under its `class` heading with the class's figures."""
    recs = [rec(T0 + i, [500, 600], 2, scenario="chat", request_class="batch") for i in range(2)]
    recs += [rec(T0 + 2 + i, [10, 20], 2, scenario="json", request_class="chat") for i in range(2)]
    table = [{"name": "chat", "weight": 1.0}, {"name": "batch", "weight": 1.0}]
    text = format_summary(build_run_result(recs, {"classes": table}).to_json())
    lines = text.splitlines()
    scen = lines[lines.index(next(x for x in lines if "Per scenario" in x)) + 1 :]
    scen = scen[: next(i for i, x in enumerate(scen) if x.startswith("-"))]
    assert [x.split()[:2] for x in scen] == [["scenario", "chat"], ["scenario", "json"]]
    assert "TTFT p50    500.0 ms" in scen[0]  # the scenario's: its requests were the batch class's
    cls = lines[lines.index(next(x for x in lines if "Per class" in x)) + 1 :]
    assert cls[0].split()[0] == "class"
    chat = next(x for x in cls if x.startswith("chat "))
    assert "10.0/10.0" in chat  # the class's TTFT p50/p99, not the scenario's 500 ms
