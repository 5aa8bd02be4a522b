"""Locust's own statistics tell the truth: one request per LLM request, E2EL as its time, tokens as its size."""

from __future__ import annotations

import os

import pytest

from orchestration.report.locust_csv import read_csv_rows
from tests.integration.core.helpers import cli


@pytest.mark.timeout(180)
def test_one_locust_request_per_llm_request(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        [
            "--scenario",
            "chat:1,json:1",
            "--num-prompts",
            "60",
            "--workers",
            "2",
            "--users",
            "6",
            "--output-len",
            "16",
            "--ignore-eos",
            "--sim-args",
            "--fixed --ttft-ms 20 --itl-ms 4 --fault-rate-500 0.1 --seed 3",
        ],
        str(tmp_path),
    )
    res = r.result
    sent = res["completed"] + res["failed"]
    assert sent == 60 and res["failed"] > 0, r.logs()[-3000:]
    rows, bad = read_csv_rows(os.path.join(r.run_dir, "locust_stats.csv"))
    assert bad == 0
    named = [x for x in rows if x["Name"] != "Aggregated"]
    assert {x["Type"] for x in named} == {"STREAM"}  # no TTFT/TPOT pseudo-requests
    assert sorted(x["Name"] for x in named) == ["chat", "json"]
    agg = next(x for x in rows if x["Name"] == "Aggregated")
    assert int(agg["Request Count"]) == sent == res["server_served"] - r.preflight_requests()
    assert int(agg["Failure Count"]) == res["failed"]
    for x in named:
        scen = res["per_scenario"][x["Name"]]
        assert int(x["Request Count"]) == scen["completed"] + scen["failed"]
        # content size = output tokens (failures count 0); Locust averages over every request
        tokens = float(x["Average Content Size"]) * int(x["Request Count"])
        assert tokens == pytest.approx(scen["total_output_tokens"], abs=1)
        # response time = E2EL of the successes (failures have theirs too, so compare the median loosely)
        assert float(x["Median Response Time"]) == pytest.approx(scen["median_e2el_ms"], rel=0.25)
