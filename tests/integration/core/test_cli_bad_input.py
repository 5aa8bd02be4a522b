"""Bad input: one line naming the problem, the documented exit code, no traceback, no load sent."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading

import pytest

from orchestration.launch.ports import free_port
from tests.integration.core.helpers import cli, cli_bare
from vllm_sim.launch import start_simulator


def _one_line_error(p, code: int, needle: str) -> None:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, p.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in p.stdout + p.stderr


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--users", "0", "--users"),
        ("--users", "many", "--users"),
        ("--request-rate", "-3", "--request-rate"),
        ("--burstiness", "0", "--burstiness"),
        ("--burstiness", "nan", "--burstiness"),
        ("--percentile-metrics", "ttft,latency", "--percentile-metrics"),
        ("--metric-percentiles", "99,100.5", "--metric-percentiles"),
        ("--metric-percentiles", "p99", "--metric-percentiles"),
        ("--num-prompts", "1.5", "--num-prompts"),
        ("--run-time", "5x", "--run-time"),
        ("--range-ratio", "1.5", "--range-ratio"),
        ("--endpoint", "generate", "--endpoint"),
        ("--goodput", "ttft:abc", "goodput"),
        ("--scenario", "nope", "unknown scenario"),
        ("--max-concurrency", "0", "--max-concurrency"),
        ("--host", "localhost:8000", "--host"),
        ("--workers", "-1", "--workers"),
    ],
)
def test_invalid_flag_values(flag: str, value: str, needle: str, tmp_path) -> None:
    p = cli_bare(["run", flag, value, "--output-dir", str(tmp_path)])
    _one_line_error(p, 2, needle)


def test_conflicting_flags_and_unknown_flag(tmp_path) -> None:
    _one_line_error(
        cli_bare(["run", "--users", "4", "--request-rate", "5", "--output-dir", str(tmp_path)]), 2, "--users"
    )
    _one_line_error(cli_bare(["run", "--frobnicate", "--output-dir", str(tmp_path)]), 2, "frobnicate")


@pytest.mark.parametrize(
    ("sim_args", "needle"),
    [
        ("--no-such-flag", "--sim-args: unrecognized arguments: --no-such-flag"),
        ("--replicas 0", "--sim-args: --replicas must be >= 1"),
        ("--max-num-seqs many --api-key sk-hidden-1", "--max-num-seqs: invalid int value: 'many'"),
    ],
)
def test_bad_sim_args_are_one_line_and_exit_2(sim_args: str, needle: str, tmp_path) -> None:
    """The embedded simulator's flags are checked before it starts: not an 85-line traceback and exit 1 from a
    start-up timeout wrapped around its usage text; the flags themselves (a key among them) are not echoed."""
    p = cli_bare(["run", f"--sim-args={sim_args}", "--output-dir", str(tmp_path)])
    _one_line_error(p, 2, needle)
    assert "sk-hidden-1" not in p.stdout + p.stderr


def test_config_file_and_env(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("users: [1, 2\n")
    _one_line_error(cli_bare(["run", "--config", str(bad)]), 2, "bad.yaml")
    _one_line_error(cli_bare(["run", "--config", str(tmp_path / "missing.yaml")]), 2, "missing.yaml")
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("userz: 3\n")
    _one_line_error(cli_bare(["run", "--config", str(unknown)]), 2, "userz")
    _one_line_error(cli_bare(["run"], env={"VLLM_LOCUST_USERS": "zero"}), 2, "users")


def test_unreachable_host(tmp_path) -> None:
    p = cli_bare(["run", "--host", f"http://127.0.0.1:{free_port()}", "--output-dir", str(tmp_path)])
    _one_line_error(p, 3, "cannot reach")


class _Html(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = b"<html><body>hello</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, *a) -> None:
        pass


def test_non_openai_server(tmp_path) -> None:
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        p = cli_bare(
            ["run", "--host", f"http://127.0.0.1:{srv.server_address[1]}", "--output-dir", str(tmp_path)]
        )
    finally:
        srv.shutdown()
    _one_line_error(p, 3, "not an OpenAI-compatible server")


def test_wrong_model_and_wrong_api_key_never_leaks_the_key(tmp_path) -> None:
    secret = "sk-test-SECRET-4242"
    with start_simulator(["--api-key", "right-key"]) as sim:
        p = cli_bare(
            ["run", "--host", sim.url, "--model", "nope", "--output-dir", str(tmp_path)],
            env={"VLLM_LOCUST_API_KEY": "right-key"},
        )
        _one_line_error(p, 3, "'nope'")
        p = cli_bare(["run", "--host", sim.url, "--api-key", secret, "--output-dir", str(tmp_path)])
        _one_line_error(p, 3, "API key")
        assert secret not in p.stdout + p.stderr
        # a good run with the key: the key appears nowhere on disk
        r = cli(
            ["--host", sim.url, "--num-prompts", "10", "--users", "2", "--workers", "1", "--output-len", "8"],
            str(tmp_path),
            env={"VLLM_LOCUST_API_KEY": "right-key"},
            name="keyed",
        )
        assert r.rc == 0, r.logs()[-2000:]
        assert r.result["completed"] == 10
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert b"right-key" not in f.read_bytes(), f


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--input-len", "-5", "'-5' is not a positive integer"),
        ("--range-ratio", "1.5", "'1.5' is not a ratio in [0, 1)"),
        ("--request-rate", "-3", "'-3' is not a number > 0"),
        ("--json-mode", "yaml", "invalid choice: 'yaml'"),
    ],
)
def test_plain_locust_checks_options_like_vllm_locust_run(
    flag: str, value: str, needle: str, tmp_path
) -> None:
    """The option table gives Locust's parser the same checks: `locust -f` refuses what `run` refuses."""
    run = cli_bare(["run", flag, value, "--output-dir", str(tmp_path)])
    _one_line_error(run, 2, needle)
    _same_error_from_plain_locust(run, [flag, value], needle)


def _same_error_from_plain_locust(
    run: subprocess.CompletedProcess[str], argv: list[str], needle: str
) -> None:
    """`locust -f locustfiles/chat.py --headless ARGV` ends with run's one-line error (exit 2)."""
    loc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "--headless", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    _one_line_error(loc, 2, needle)
    assert run.stderr.split("error:", 1)[1] == loc.stderr.split("error:", 1)[1]  # the same message


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["--ramp-up-strategy", "linear", "--num-prompts", "10"],
            "--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps",
        ),
        (["--ramp-up-end-rps", "4"], "--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy"),
        (["--request-rate", "inf"], "--request-rate inf needs --num-prompts"),
    ],
)
def test_plain_locust_refuses_a_bad_combination_like_vllm_locust_run(
    argv: list[str], needle: str, tmp_path
) -> None:
    """Options check themselves wherever they are built: `locust -f` refuses in one line, before any load, the
    combination `run` refuses (the rules of one group and across groups, not only each value)."""
    run = cli_bare(["run", *argv, "--output-dir", str(tmp_path)])
    _one_line_error(run, 2, needle)
    nothing = (
        f"http://127.0.0.1:{free_port()}"  # no server: a run that started would fail, not exit 2 at once
    )
    _same_error_from_plain_locust(
        run, ["--host", nothing, "-u", "1", "-t", "3s", "--only-summary", *argv], needle
    )
