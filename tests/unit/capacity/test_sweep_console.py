"""A sweep's console: its answer first, then every step in one table with no column that no step has a value
for; each step's own progress and full summary in its directory's console.txt, not on the terminal."""

from __future__ import annotations

import os
from typing import Any

import pytest

from orchestration.capacity.sweep import format_sweep, run_sweep
from tests.unit.report.helpers import make_records, write_run
from vllm_users.options import Options, build

pytestmark = pytest.mark.timeout(60)

FULL_SUMMARY = "=============== vllm-locust Result ==============="


def _fake_run(ttft_by_rate: dict[float, float]) -> Any:
    """A step that writes a run of 40 requests at the TTFT its rate is given, and prints a full summary as a
    real run does."""

    def run_one(b: Options, watch: Any = None) -> int:
        rate = b.load.request_rate or 1.0
        recs = make_records(40, ttft_ms=ttft_by_rate[rate], seed=int(rate))
        write_run(os.path.join(b.outputs.output_dir, b.outputs.run_name), recs)
        print(f"{FULL_SUMMARY}\nMedian TTFT (ms): {ttft_by_rate[rate]}")
        return 0

    return run_one


def test_the_answer_comes_first_then_one_table(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    a = build(
        host="http://127.0.0.1:9",
        output_dir=str(tmp_path),
        no_report=True,
        sweep="rates:2,4",
        run_name="r",
    )
    assert run_sweep(a, _fake_run({2.0: 20.0, 4.0: 20.0})) == 0
    out = capsys.readouterr().out
    assert FULL_SUMMARY not in out  # no step's full summary on the console...
    for step in ("step-01-rate-2", "step-02-rate-4"):  # ...it is in the step's directory
        with open(os.path.join(tmp_path, "r", step, "console.txt")) as fh:
            assert FULL_SUMMARY in fh.read()
    lines = out.splitlines()
    at = lines.index("=== rates sweep ===")
    assert lines[at - 2].startswith("vllm-locust: Peak output throughput:")  # the answer before the table
    assert lines[at - 1].startswith("vllm-locust: At the lightest load")
    header = lines[at + 1].split("  ")
    assert [h.strip() for h in header if h.strip()][:3] == ["step", "req/s", "ok"]
    for absent in ("startup", "E2EL p99", "efficiency", "experts", "$/1M", "verdict"):  # no step has one
        assert absent not in lines[at + 1]
    assert len(lines[at + 2 : at + 4]) == 2 and lines[at + 4].startswith("Sweep: ")
    assert not any(" - " in f" {line} " for line in lines[at + 2 : at + 4])  # no cell without a number


def test_a_sweep_with_an_slo_is_judged_like_the_search(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    a = build(
        host="http://127.0.0.1:9",
        output_dir=str(tmp_path),
        no_report=True,
        sweep="rates:2,4",
        run_name="s",
        goodput="ttft:100",
    )
    run_sweep(a, _fake_run({2.0: 20.0, 4.0: 400.0}))
    out = capsys.readouterr().out
    assert "vllm-locust: Highest load within the SLO (ttft:100ms at p99, failures <= 1.0%): rate 2 (" in out
    assert "the next load, rate 4 (" in out
    rows = out[out.index("=== rates sweep ===") :].splitlines()
    assert rows[1].rstrip().endswith("verdict")
    assert rows[2].endswith("holds") and "fails: p99 TTFT " in rows[3] and rows[3].endswith(" ms > 100 ms")


def test_a_column_with_one_value_is_kept() -> None:
    doc: dict[str, Any] = {
        "kind": "server_sweep",
        "steps": [
            {"label": "a=1", "started": True, "startup_s": 3.25, "achieved_rate": 2.0, "verdict": "ran"},
            {
                "label": "a=2",
                "started": False,
                "startup_s": 0.5,
                "verdict": "failed start",
                "error": "exited 1",
            },
        ],
    }
    text = format_sweep(doc, "/runs/ss")
    table = text[text.index("=== server sweep ===") :].splitlines()
    assert table[1].split() == ["step", "startup", "s", "req/s", "verdict"]
    assert table[2].split() == ["a=1", "3.2", "2", "ran"] or table[2].split() == ["a=1", "3.3", "2", "ran"]
    assert table[3].split()[:3] == ["a=2", "0.5", "-"] and table[3].endswith("failed start: exited 1")
