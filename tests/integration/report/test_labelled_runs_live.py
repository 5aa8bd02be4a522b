"""Two labelled cases of tests/labelled_runs.py made live against the simulator, as their fixtures were: the
diagnosis gives exactly the expected findings on fresh runs too (the unit test reads the recorded fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.labelled_runs import CASES, fired, load_fixture, record, run_case

pytestmark = pytest.mark.timeout(240)
LIVE = ("healthy", "cache_off")  # the quickest cause and the quickest absence of one: ~10 s each


@pytest.mark.parametrize("label", LIVE)
def test_live_labelled_run(label: str, tmp_path: Path) -> None:
    (case,) = [c for c in CASES if c.label == label]
    data = record(case, run_case(case, tmp_path))
    res = data["runs"][0]["result"]
    assert res["completed"] > 0 and res["failed"] == 0
    found = fired(load_fixture(data))
    if res.get(
        "client_bound"
    ):  # a busy box can really make the client the bottleneck: that is no false alarm
        found.discard(("client_bound", data["runs"][0]["name"]))
    assert found == set(case.expected), case.cause
