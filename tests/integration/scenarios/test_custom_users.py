"""Bring your own user: the example locustfiles (docs/custom_scenarios.md) through `vllm-locust run -f` with 2
workers against the simulator, a user class by `package.module:Class`, remote workers with `-f`, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from orchestration.launch.ports import free_port
from tests.integration.core.helpers import cli_bare
from tests.integration.scenarios.runner import succeeded, vllm_locust

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "locustfiles" / "examples"
FAST_SIM = ["--sim-args", "--fixed --ttft-ms 5 --itl-ms 1", "--output-len", "16"]


def test_rag_example(tmp_path) -> None:
    r = vllm_locust(
        tmp_path,
        "-f",
        str(EXAMPLES / "rag.py"),
        "--num-prompts",
        "16",
        "--input-len",
        "300",
        *FAST_SIM,
        workers=2,
    )
    assert succeeded(r), r.err
    res = r.result
    assert res["completed"] == 16 and list(res["per_scenario"]) == ["rag"]
    assert res["validity_rate"] == 1.0
    recs = r.records()
    assert sorted(x["session"] for x in recs) == list(range(16)) and {x["turn"] for x in recs} == {0}
    assert all(
        x["prompt_tokens"] >= 300 and 1 <= x["output_tokens"] <= 16 for x in recs
    )  # the document is in there
    assert {x["extra"]["document"] for x in recs} == set(range(8))
    assert "ttft_by_turn" not in res  # one request per session: no turns to compare


def test_agent_example_links_requests_by_session_and_turn(tmp_path) -> None:
    r = vllm_locust(tmp_path, "-f", str(EXAMPLES / "agent.py"), "--num-prompts", "8", *FAST_SIM, workers=2)
    assert succeeded(r), r.err
    res = r.result
    assert res["num_prompts"] == 8 and res["completed"] == 8 * 4  # a ticket is a session of 4 requests
    sessions: dict[int, list[dict]] = defaultdict(list)
    for x in r.records():
        assert x["scenario"] == "agent"
        sessions[x["session"]].append(x)
    assert sorted(sessions) == list(range(8))
    for recs in sessions.values():
        recs.sort(key=lambda x: x["turn"])
        assert [x["turn"] for x in recs] == [0, 1, 2, 3]
        assert len({(x["worker"], x["user"]) for x in recs}) == 1  # one user runs the whole session
        for a, b in zip(recs, recs[1:], strict=False):
            assert b["prompt_tokens"] > a["prompt_tokens"]  # the history grows
            assert b["t_start"] - (a["t_start"] + a["end_us"] / 1e6) >= 0.2 - 0.002  # think time
    assert {k: v["count"] for k, v in res["ttft_by_turn"].items()} == {"0": 8, "1": 8, "2": 8, "3": 8}


def test_minimal_readme_locustfile_with_summary_and_report(tmp_path) -> None:
    """The README's 15-line locustfile, a class reference beside a built-in scenario, and the report."""
    assert len((EXAMPLES / "minimal.py").read_text().splitlines()) <= 15
    env = {**os.environ, "PYTHONPATH": f"{EXAMPLES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "run",
            "-f",
            str(EXAMPLES / "minimal.py"),
            "--scenario",
            "chat:1,rag:RagUser:1",
            "--workers",
            "2",
            "--num-prompts",
            "30",
            "--input-len",
            "64",
            *FAST_SIM,
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "mini",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert p.returncode in (0, 5), p.stderr[-3000:]
    assert "Traceback" not in p.stdout + p.stderr
    assert "Successful requests:" in p.stdout  # the summary
    run_dir = tmp_path / "mini"
    assert (run_dir / "report" / "report.html").is_file()
    import json

    res = json.loads((run_dir / "result.json").read_text())
    assert res["completed"] == 30 and set(res["per_scenario"]) == {"haiku", "chat", "rag"}


def test_remote_worker_runs_the_same_locustfile(tmp_path) -> None:
    port = free_port()
    master = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "run",
            "-f",
            str(EXAMPLES / "minimal.py"),
            "--workers",
            "0",
            "--expect-workers",
            "1",
            "--master-port",
            str(port),
            "--num-prompts",
            "10",
            *FAST_SIM,
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "remote",
            "--no-report",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "worker",
            "--master-host",
            "127.0.0.1",
            "--master-port",
            str(port),
            "-f",
            str(EXAMPLES / "minimal.py"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, err = master.communicate(timeout=240)
        worker.communicate(timeout=60)
    finally:
        for proc in (master, worker):
            if proc.poll() is None:
                proc.kill()
    assert master.returncode in (0, 5), err[-3000:]
    import json

    res = json.loads((tmp_path / "remote" / "result.json").read_text())
    assert res["completed"] == 10 and list(res["per_scenario"]) == ["haiku"]


def _one_line_error(p: subprocess.CompletedProcess, needle: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], p.stderr
    assert "Traceback" not in p.stdout + p.stderr


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (None, "no such file"),
        ("x = 1\n", "no LLMUser subclass in it"),
        (
            "import nosuch_module_here\n",
            "import failed: ModuleNotFoundError: No module named 'nosuch_module_here'",
        ),
        ("from locust import HttpUser\nclass Plain(HttpUser):\n    pass\n", "Plain is a Locust User but not"),
    ],
)
def test_bad_user_input_is_one_line_exit_2_nothing_sent(tmp_path, text: str | None, needle: str) -> None:
    path = tmp_path / "mine.py"
    if text is not None:
        path.write_text(text)
    out = tmp_path / "out"
    _one_line_error(cli_bare(["run", "-f", str(path), "--output-dir", str(out)]), needle)
    assert not out.exists()  # no run directory: no simulator, no request
    _one_line_error(cli_bare(["worker", "--master-host", "127.0.0.1", "-f", str(path)]), needle)


def test_bad_class_reference(tmp_path) -> None:
    _one_line_error(
        cli_bare(["run", "--scenario", "os:path", "--output-dir", str(tmp_path / "o")]),
        "not a subclass of vllm_users.LLMUser",
    )
    _one_line_error(
        cli_bare(["worker", "--master-host", "x", "--scenario", "nosuch.mod:X"]), "cannot import nosuch.mod"
    )
