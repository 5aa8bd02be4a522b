"""End to end: `vllm-locust gate` does not call noise a change, and catches a real one.

21 independent short runs of one configuration against the embedded simulator (default latency model; each run
starts its own simulator, master and worker) give 20 A/A comparisons, consecutive pairs (1, 2), (2, 3), ...:
at the default rules at most one may flag a regression. Three runs against a simulator 15 % slower per decode
step (its TPOT) are each flagged.

Why this is honest: every pair is a genuine A/A comparison of two separate runs, so the run-to-run variation
that the gate must tolerate (a restarted server, the machine's load) is in it; split halves of one run would
share the server and the moment and hide exactly that. The expected number of false alarms over 20 consecutive
pairs is the same as over 20 disjoint pairs (42 runs); sharing runs only makes the count vary more (one odd run
sits in two pairs), which makes "at most 1" harder to meet, not easier. Pairs are consecutive so that each
compares runs a few seconds apart, as a CI job compares a baseline and a candidate made on the same machine
class; each slowed run is compared with the run just before it for the same reason. The A/A loop calls the
command's own comparison (orchestration.gate.verdict.gate, default rules, default resamples) in-process to
spare 20 interpreter starts; the command line itself is checked on a few of the same runs.

Cost: 24 runs of 150 requests (~8-10 s each on two cores), ~4 min.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from orchestration.gate.rules import parse_rules
from orchestration.gate.samples import load_side
from orchestration.gate.verdict import gate
from vllm_sim.config import SimConfig
from vllm_users import exit_codes

pytestmark = pytest.mark.timeout(540)

RUNS = 21
SLOW_AFTER = (5, 12, 19)  # a slowed run right after these runs (1-based), compared with that run
LOAD = ["--workers", "1", "--users", "8", "--num-prompts", "150", "--input-len", "32", "--output-len", "16",
        "--no-report", "--quiet"]  # fmt: skip
_d = SimConfig()
SLOW = f"--decode-step-ms {_d.decode_step_ms * 1.15:g} --decode-per-seq-ms {_d.decode_per_seq_ms * 1.15:g}"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True,
                       timeout=200, env={**os.environ, **(env or {})})  # fmt: skip
    assert "Traceback" not in p.stdout + p.stderr, p.stderr[-3000:]
    return p


def _run(out: str, name: str, *extra: str) -> str:
    p = _cli("run", "--output-dir", out, "--run-name", name, *LOAD, *extra)
    assert p.returncode == exit_codes.OK, p.stdout[-2000:] + p.stderr[-2000:]
    return os.path.join(out, name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    out = str(tmp_path_factory.mktemp("gate"))
    same, slow = [], []
    for i in range(1, RUNS + 1):
        same.append(_run(out, f"a{i:02d}"))
        if i in SLOW_AFTER:
            slow.append(_run(out, f"slow-after-a{i:02d}", "--sim-args", SLOW))
    return {"same": same, "slow": slow}


def test_noise_is_not_a_change(runs: dict[str, list[str]]) -> None:
    rules = parse_rules(None)
    sides = [load_side(d) for d in runs["same"]]
    reports = [gate(a, b, rules) for a, b in zip(sides, sides[1:], strict=False)]
    flagged = [(i + 1, r.headline()) for i, r in enumerate(reports) if r.regressed]
    assert len(reports) == 20
    assert len(flagged) <= 1, flagged
    assert all(x.verdict == "unchanged" for r in reports for x in r.results if x.metric == "error_rate")


def test_a_slower_server_is_flagged_every_time(runs: dict[str, list[str]]) -> None:
    rules = parse_rules(None)
    for i, slow in zip(SLOW_AFTER, runs["slow"], strict=True):
        rep = gate(load_side(runs["same"][i - 1]), load_side(slow), rules)
        assert rep.exit_code == exit_codes.GATE_REGRESSED, rep.headline()
        tpot = next(r for r in rep.results if r.metric == "median_tpot_ms")
        assert tpot.verdict == "regressed" and tpot.change is not None and tpot.change > 5, tpot


def test_command_line(runs: dict[str, list[str]], tmp_path) -> None:  # type: ignore[no-untyped-def]
    a, b = runs["same"][0], runs["same"][1]
    summary = tmp_path / "summary.md"
    p = _cli("gate", a, b, "--junit", str(tmp_path / "aa.xml"), "--markdown", str(tmp_path / "aa.md"),
             "--json", str(tmp_path / "aa.json"), env={"GITHUB_STEP_SUMMARY": str(summary)})  # fmt: skip
    assert p.returncode in (exit_codes.OK, exit_codes.GATE_REGRESSED), p.stderr  # the one A/A pair in 20 allowed
    assert "block bootstrap" in p.stdout and "Bonferroni" in p.stdout
    doc = json.load(open(tmp_path / "aa.json"))
    assert doc["exit_code"] == p.returncode and len(doc["rules"]) == 5
    assert summary.read_text() == (tmp_path / "aa.md").read_text() + "\n"
    # the baseline kept as a file (a CI artifact) against a slowed candidate
    base = str(tmp_path / "ci" / "baseline.npz")
    assert _cli("gate", "--save-baseline", base, runs["same"][SLOW_AFTER[0] - 1]).returncode == exit_codes.OK
    p = _cli("gate", base, runs["slow"][0], "--junit", str(tmp_path / "slow.xml"))
    assert p.returncode == exit_codes.GATE_REGRESSED, p.stdout
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "slow.xml").getroot().iter("testcase")}
    assert cases["median_tpot_ms:5%"].find("failure") is not None
    # runs of different settings are not compared
    other = str(tmp_path / "other")
    shutil.copytree(b, other)
    meta = json.load(open(os.path.join(other, "run_meta.json")))
    json.dump({**meta, "output_len": 64}, open(os.path.join(other, "run_meta.json"), "w"))
    p = _cli("gate", a, other)
    assert p.returncode == exit_codes.USAGE and "differ in output_len (16 vs 64)" in p.stderr, p.stderr
