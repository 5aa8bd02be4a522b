"""The diagnosis on labelled runs (tests/labelled_runs.py): live simulator runs of a known cause, recorded as
fixtures. Each case gives exactly its expected findings: no rule fires where its cause is absent (every rule is
held to that on every case) and none stays silent where its cause is present."""

from __future__ import annotations

import json

import pytest

from orchestration.report import diagnose as dg
from tests.labelled_runs import CASES, FIXTURES, HOOKS, fired, load_fixture


@pytest.mark.parametrize("case", CASES, ids=[c.label for c in CASES])
def test_labelled_run_gives_exactly_its_findings(case) -> None:  # type: ignore[no-untyped-def]
    data = json.loads((FIXTURES / f"{case.label}.json").read_text())
    assert [r["name"] for r in data["runs"]] == [name for name, _args in case.runs]
    assert fired(load_fixture(data)) == set(case.expected), case.cause


def test_every_case_has_a_fixture_and_every_label_a_rule() -> None:
    assert sorted(p.stem for p in FIXTURES.glob("*.json")) == sorted(c.label for c in CASES)
    rules = {r.__name__ for r in dg.RUN_RULES}
    assert "_client_bound" in rules and set(HOOKS.values()) == {"client_bound", "machine_busy"}


def test_prefix_findings_name_the_ceiling() -> None:
    """The cache rule says what the workload allowed, and the trace's run at its ceiling is no finding."""
    off = load_fixture(json.loads((FIXTURES / "trace_cache_off.json").read_text()))
    (f,) = dg.diagnose(off)
    ceiling = off[0].result["replay"]["expected_block_reuse"]
    assert f"of a ceiling of {ceiling:.1%}" in f.evidence and f.severity == "warning"
    at = load_fixture(json.loads((FIXTURES / "trace_at_ceiling.json").read_text()))[0].result
    assert at["replay"]["server_prefix_hit_rate"] == pytest.approx(
        at["replay"]["expected_block_reuse"], abs=0.02
    )
