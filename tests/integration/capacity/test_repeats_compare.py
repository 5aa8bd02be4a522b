"""`--repeats` and `vllm-locust report A B`: the same config twice is no significant difference, a slower
server is, with the test named (Welch's t-test over repeats, Mann-Whitney U for single runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.core.helpers import cli

LOAD = ["--users", "4", "--num-prompts", "40", "--workers", "1", "--output-len", "16", "--ignore-eos"]


def _report(tmp: str, *dirs: str) -> tuple[str, dict]:  # type: ignore[type-arg]
    out = os.path.join(tmp, "rep-" + "-".join(os.path.basename(d) for d in dirs))
    p = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "report", *dirs, "-o", out, "--format", "json,md,html"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    with open(os.path.join(out, "report.json")) as fh:
        return p.stdout, json.load(fh)


def _sig(report: dict, metric: str) -> dict:  # type: ignore[type-arg]
    row = next(r for r in report["comparison"]["rows"] if r["metric"] == metric)
    return row["changes"][0]["significance"]


@pytest.mark.exclusive  # "no significant difference" between two runs: other jobs' load would be one
@pytest.mark.timeout(600)
def test_repeats_and_significance(tmp_path) -> None:
    """~70 s alone on the machine: 8 runs (3 + 2 repeats of one config, 3 of a slower one), the fewest that give
    Welch's t-test two samples on each side and a 95 % CI over 3."""
    tmp = str(tmp_path)
    runs = {}
    for name, itl, n in (("a", 10, 3), ("b", 10, 2), ("slow", 20, 3)):
        r = cli(
            [*LOAD, "--repeats", str(n), "--sim-args", f"--fixed --ttft-ms 50 --itl-ms {itl}"],
            tmp,
            timeout=240,
            name=name,
        )
        assert r.rc == 0, r.logs()[-3000:]
        runs[name] = r.run_dir
    with open(os.path.join(runs["a"], "repeats.json")) as fh:
        rep = json.load(fh)
    assert rep["runs"] == ["repeat-01", "repeat-02", "repeat-03"]
    tpot = rep["metrics"]["median_tpot_ms"]
    assert len(tpot["values"]) == 3 and tpot["ci_low"] <= tpot["mean"] <= tpot["ci_high"]
    assert tpot["mean"] == pytest.approx(10.0, rel=0.15)
    assert "Over 3 repeats (mean ± 95 % CI)" in r.out
    # each repeat draws its own prompts: the simulator's prefix cache (on) must not answer repeats 2 and 3 from
    # repeat 1's (with one seed for all, repeat 2 hit 95 % of its prompt tokens)
    from orchestration.server.metrics_sampler import summarize_file

    for name in rep["runs"]:
        served = summarize_file(os.path.join(runs["a"], name)) or {}
        assert served.get("prefix_cache_queries") and served["prefix_cache_hit_rate"] < 0.1, (name, served)

    out, same = _report(tmp, runs["a"], runs["b"])
    assert "b vs a: 0 of" in out, out
    assert _sig(same, "median_tpot_ms")["test"] == "Welch's t-test"
    out, diff = _report(tmp, runs["a"], runs["slow"])
    s = _sig(diff, "median_tpot_ms")
    assert s["significant"] and s["test"] == "Welch's t-test", out
    assert "significant (Welch's t-test" in out

    # single runs: per-request samples (Mann-Whitney U), still no change from noise
    one = lambda n: os.path.join(runs[n], "repeat-01")  # noqa: E731
    out, same1 = _report(tmp, one("a"), one("b"))
    assert ": 0 of 8 tested metrics differ significantly" in out, out
    assert _sig(same1, "median_tpot_ms")["test"] == "Mann-Whitney U"
    assert _sig(same1, "p99_tpot_ms")["test"] is None
    out, diff1 = _report(tmp, one("a"), one("slow"))
    assert _sig(diff1, "median_tpot_ms")["significant"] and _sig(diff1, "median_e2el_ms")["significant"], out
