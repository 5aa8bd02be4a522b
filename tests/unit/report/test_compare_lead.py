"""A comparison's lead: which run is worse and by how much where a test finds it significant, said first; a
significant regression under the same setup is a finding (labelled runs: tests/labelled_runs.py)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from orchestration.report.compare import compare, lead, regressions
from orchestration.report.generate import generate
from orchestration.report.model import build_report
from orchestration.report.render import render_markdown
from tests.labelled_runs import FIXTURES, load_fixture
from tests.unit.report.helpers import make_records, write_run


def _runs(label: str) -> list[Any]:
    return load_fixture(json.loads((FIXTURES / f"{label}.json").read_text()))


def test_a_slower_server_leads_the_comparison_and_fires_a_rule() -> None:
    runs = _runs("regression")  # B: --decode-step-ms 12 against 8
    c = compare(runs)
    (line,) = lead(c)
    assert line.startswith("slow is worse than base: "), line
    tpot = next(r for r in c["rows"] if r["metric"] == "median_tpot_ms")["changes"][0]
    assert f"median_tpot_ms {tpot['pct']:+.1f} %" in line and tpot["pct"] > 30
    (f,) = regressions(c)
    assert f.run == "slow" and f.severity == "warning" and "Mann-Whitney U" in f.evidence
    report = build_report(runs)
    verdicts = {name: word for name, _load, word in report.headline()}
    assert verdicts["base"] == "no problem found"
    assert "Significantly worse than base" in verdicts["slow"]
    md = render_markdown(report)
    assert md.index("slow is worse than base") < md.index("### Diagnosis")


def test_an_identical_pair_leads_with_no_difference_and_fires_nothing() -> None:
    c = compare(_runs("identical_pair"))
    (line,) = lead(c)
    assert line.startswith("second vs first: no significant difference (") and regressions(c) == []


def test_a_different_setup_is_said_and_is_no_regression() -> None:
    c = compare(_runs("saturated"))  # 2 users, then 8: slower TTFT, but another experiment
    (line,) = lead(c)
    assert "c8 is worse than c2" in line and line.endswith("the setups differ, a different experiment.")
    assert regressions(c) == []


def test_the_console_leads_with_it(tmp_path: Any, capsys: Any) -> None:
    rng = np.random.default_rng(3)
    a = write_run(os.path.join(tmp_path, "a"), make_records(120, ttft_ms=20.0))
    slow = make_records(120, ttft_ms=20.0, itl_ms=15.0)
    for r in slow:  # a little spread, so the test has ranks to work with
        r.end_us += int(rng.integers(0, 500))
    b = write_run(os.path.join(tmp_path, "b"), slow)
    assert generate([a, b], os.path.join(tmp_path, "out"), ["json"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("vllm-locust report: b is worse than a: "), first
