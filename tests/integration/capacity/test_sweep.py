"""`--sweep`: one run directory per step, sweep.json, the combined report with curves and the Pareto view."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.core.helpers import cli

SIM = ["--sim-args", "--fixed --ttft-ms 20 --itl-ms 5", "--output-len", "8", "--ignore-eos", "--workers", "1"]


def _sweep(run_dir: str) -> dict:  # type: ignore[type-arg]
    with open(os.path.join(run_dir, "sweep.json")) as fh:
        return json.load(fh)


@pytest.mark.timeout(400)
def test_rate_sweep_and_report(tmp_path) -> None:
    r = cli([*SIM, "--sweep", "rates:5,20", "--num-prompts", "40"], str(tmp_path), timeout=300)
    assert r.rc == 0, r.logs()[-3000:]
    doc = _sweep(r.run_dir)
    steps = doc["steps"]
    assert [(s["kind"], s["target"]) for s in steps] == [("rate", 5.0), ("rate", 20.0)]
    for s in steps:
        res = json.load(open(os.path.join(s["run_dir"], "result.json")))
        assert res["request_rate"] == s["target"] and res["completed"] == 40
        # the steady interior's rate: the target times the fraction the server kept up with (docs/capacity.md)
        kept = min(1.0, res["delivery"]["achieved_fraction"])
        assert s["achieved_rate"] == pytest.approx(s["target"] * kept) and kept > 0.9
        assert s["ttft_p50_ms"] == pytest.approx(res["median_ttft_ms"]) and s["ttft_p50_ms"] >= 20
        assert s["output_tok_per_s_per_user"] == pytest.approx(1000 / res["median_tpot_ms"])
    assert steps[1]["achieved_rate"] > 2 * steps[0]["achieved_rate"]
    # the answer, then one table; each step's full summary in its directory's console.txt, not on the terminal
    assert r.out.index("vllm-locust: Peak output throughput:") < r.out.index("=== rates sweep ===")
    assert "vllm-locust Result" not in r.out
    for s in steps:
        assert "vllm-locust Result" in open(os.path.join(s["run_dir"], "console.txt")).read()
    p = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "report", r.run_dir],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    html = open(os.path.join(r.run_dir, "report", "report.html")).read()
    assert 'id="plot-latency-vs-rate"' in html and 'id="plot-pareto"' in html and 'id="steps"' in html
    assert "<script" not in html


@pytest.mark.timeout(400)
def test_auto_sweep(tmp_path) -> None:
    r = cli(
        [*SIM, "--sweep", "auto:2", "--num-prompts", "30", "--no-server-metrics"], str(tmp_path), timeout=380
    )
    assert r.rc == 0, r.logs()[-3000:]
    steps = _sweep(r.run_dir)["steps"]
    assert [s["kind"] for s in steps] == ["synchronous", "throughput", "rate", "rate"]
    sync, thr = steps[0]["achieved_rate"], steps[1]["achieved_rate"]
    assert steps[0]["max_concurrent_requests"] == 1 and thr > 3 * sync
    # the rates lie evenly between the synchronous and the throughput rate
    assert steps[2]["target"] == pytest.approx(sync + (thr - sync) / 3, rel=1e-3)
    assert steps[3]["target"] == pytest.approx(sync + 2 * (thr - sync) / 3, rel=1e-3)


def test_bad_sweep_is_a_usage_error(tmp_path) -> None:
    r = cli(["--sweep", "speeds:1,2"], str(tmp_path))
    assert r.rc == 2 and "expected rates:1,2,4,8, concurrency:1,8,32 or auto[:N]" in r.err
