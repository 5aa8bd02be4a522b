"""The faults a user hits, each ended by one line naming it and a documented exit code, with nothing measured lost:
an unwritable --output-dir, a full disk, SIGTERM, an absurd trace timestamp, prompts above the model's context,
a warm-up that takes the whole run, and user code that raises."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.integration.core.helpers import cli, cli_bare, wait_streaming
from vllm_users import exit_codes

pytestmark = pytest.mark.timeout(120)

FAST_SIM = "--fixed --ttft-ms 2 --itl-ms 1"


def _last_line(text: str) -> str:
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1] if lines else ""


def test_an_output_dir_that_is_a_file_is_one_line_and_exit_2(tmp_path) -> None:
    blocker = tmp_path / "results"
    blocker.write_text("not a directory")
    p = cli_bare(
        ["run", "--num-prompts", "2", "--output-dir", str(blocker), "--run-name", "x", "--no-report"]
    )
    assert p.returncode == exit_codes.USAGE, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr + p.stdout
    err = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and str(blocker) in err[0] and "not a directory" in err[0], err


def test_a_full_disk_stops_the_run_keeps_what_was_written_and_exits_10(tmp_path) -> None:
    # a 32 KiB file size limit on the run's processes: the records outgrow it within a second of load; the run
    # would otherwise last its --run-time (120 s, past this test's timeout)
    r = cli(
        ["--run-time", "120", "--users", "4", "--workers", "1", "--output-len", "8", "--sim-args", FAST_SIM],
        str(tmp_path),
        timeout=90,
        prefix=["bash", "-c", 'ulimit -f 32 && exec "$@"', "ulimit"],
    )
    assert r.rc == exit_codes.WRITE_FAILED, (r.rc, r.logs()[-3000:])
    last = _last_line(r.err)
    assert last.startswith("vllm-locust: error: writing ") and "failed: File too large" in last, r.err[-2000:]
    assert r.run_dir in last
    assert r.result["exit_code"] == exit_codes.WRITE_FAILED
    assert any("failed: File too large" in w for w in r.result["warnings"])
    assert r.result["completed"] > 0  # the records written before the failure are the result's


@pytest.mark.parametrize("to", ["cli", "master"])  # the master alone: a Kubernetes pod deleted mid-run
def test_sigterm_mid_run_is_recorded_as_an_interruption(tmp_path, to: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--run-time",
        "120",
        "--users",
        "2",
        "--workers",
        "1",
        "--output-len",
        "8",
        "--sim-args",
        FAST_SIM,
        "--stop-timeout",
        "1",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "term",
        "--no-report",
    ]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_streaming(str(tmp_path / "term"), ok=5, timeout=60)
        if to == "cli":
            p.send_signal(signal.SIGTERM)
        else:
            os.kill(json.loads((tmp_path / "term" / "pids.json").read_text())["master"], signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == exit_codes.INTERRUPTED, (p.returncode, out[-2000:], err[-2000:])
    run_dir = tmp_path / "term"
    assert json.loads((run_dir / "exit_code.json").read_text())["exit_code"] == exit_codes.INTERRUPTED
    res = json.loads((run_dir / "result.json").read_text())
    assert res["exit_code"] == exit_codes.INTERRUPTED and res["completed"] >= 5
    assert any(w.startswith("interrupted by SIGTERM") for w in res["warnings"]), res["warnings"]


def test_a_trace_timestamp_of_1e308_is_refused_naming_its_line(tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_len": 8, "output_len": 2}\n'
        '{"timestamp": 1, "input_len": 8, "output_len": 2}\n'
        '{"timestamp": 1e308, "input_len": 8, "output_len": 2}\n'
    )
    p = cli_bare(
        ["run", "--trace", str(trace), "--workers", "1", "--output-dir", str(tmp_path), "--no-report"],
        timeout=60,
    )
    assert p.returncode == exit_codes.USAGE, (p.returncode, p.stderr[-2000:])
    err = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and f"{trace}:3:" in err[0] and "30 days" in err[0], err


@pytest.mark.parametrize(
    ("lengths", "said"),
    [
        (["--input-len", "300"], "--input-len 300 (+ 7 tokens the server adds: template, BOS) does not fit"),
        # 125 + 128 = 253 would fit, but the simulator's chat template adds 7 tokens (a 400 for every request)
        (["--input-len", "125", "--output-len", "128"], "+ --output-len 128 = 260 tokens do not fit"),
    ],
)
def test_prompts_above_the_models_context_stop_at_the_preflight(
    tmp_path, lengths: list[str], said: str
) -> None:
    r = cli(
        ["--num-prompts", "3", "--workers", "1", "--sim-args", f"{FAST_SIM} --max-model-len 256", *lengths],
        str(tmp_path),
        timeout=60,
    )
    assert r.rc == exit_codes.PREFLIGHT, (r.rc, r.logs()[-2000:])
    last = _last_line(r.err)
    assert said in last and "max_model_len 256" in last, r.err
    assert not os.path.exists(os.path.join(r.run_dir, "records.jsonl"))  # no load was sent


def test_a_warmup_that_takes_every_request_is_refused_before_the_load(tmp_path) -> None:
    p = cli_bare(
        ["run", "--warmup", "500r", "--num-prompts", "10", "--output-dir", str(tmp_path), "--no-report"]
    )
    assert p.returncode == exit_codes.USAGE, (p.returncode, p.stderr[-2000:])
    err = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(err) == 1 and "--warmup 500r" in err[0] and "--num-prompts" in err[0], err
    assert os.listdir(tmp_path) == []  # nothing was run


USER_CODE = """\
import vllm_users as vu


class Raiser(vu.ChatUser):
    scenario = "raiser"

    def build_request(self, ticket):
        raise ValueError("no prompt for ticket %d" % 0)
"""


def test_user_code_that_raises_is_named_in_the_last_line(tmp_path) -> None:
    code = tmp_path / "my_users.py"
    code.write_text(USER_CODE)
    r = cli(
        ["-f", str(code), "--num-prompts", "4", "--workers", "1", "--sim-args", FAST_SIM],
        str(tmp_path / "out"),
        timeout=90,
    )
    assert r.rc != exit_codes.OK, r.logs()[-2000:]
    last = _last_line(r.err)
    assert "ValueError: no prompt for ticket 0" in last and f"{code}:8" in last, r.err[-2000:]
    assert r.result["meta"]["user_errors"][0]["count"] >= 1
