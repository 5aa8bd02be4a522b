"""Credentials reach the server and nowhere else: `vllm-locust run` with an API key, a gateway's auth header and a
password in the URL, against a simulator that demands them, then every file of the run directory (the report's
included) and everything the command printed searched for each secret."""

from __future__ import annotations

import base64
import http.server
import json
import os
import secrets
import subprocess
import sys
import threading

import pytest

from vllm_sim.launch import start_simulator

FAST = ["--num-prompts", "12", "--users", "2", "--workers", "1", "--input-len", "16", "--output-len", "4"]


def _run(args: list[str], tmp: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        *args,
        *FAST,
        "--output-dir",
        tmp,
        "--run-name",
        "r",
        "--print-result",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})})


def _leaks(run_dir: str, printed: str, values: dict[str, str]) -> list[str]:
    """'what in where' for each secret value found in a file of `run_dir` or in `printed`."""
    found = []
    for root, _dirs, files in os.walk(run_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as fh:
                data = fh.read()
            found += [
                f"{what} in {os.path.relpath(os.path.join(root, name), run_dir)}"
                for what, v in values.items()
                if v.encode() in data
            ]
    found += [f"{what} in stdout/stderr" for what, v in values.items() if v in printed]
    return found


def _check_ok(p: subprocess.CompletedProcess[str], run_dir: str, served: int | None = 12) -> None:
    assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-1500:]
    with open(os.path.join(run_dir, "result.json")) as fh:
        result = json.load(fh)
    assert result["completed"] == 12 and result["failed"] == 0
    with open(os.path.join(run_dir, "server_metrics.jsonl")) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    assert rows and all("v" in r for r in rows), rows[:2]  # every scrape of /metrics answered
    assert (
        result["server_served"] == served
    )  # the master's scrape after the drain carried the credentials too


@pytest.mark.timeout(240)
def test_api_key_gateway_header_and_url_password_never_written(tmp_path) -> None:
    key, header, password = (f"{w}-{secrets.token_hex(8)}" for w in ("key", "gw", "pw"))
    with start_simulator(
        [
            "--fixed",
            "--ttft-ms",
            "2",
            "--itl-ms",
            "1",
            "--api-key",
            key,
            "--require-header",
            f"X-Gateway-Token: {header}",
        ]
    ) as sim:
        host = sim.url.replace("http://", f"http://alice:{password}@")
        p = _run(["--host", host, "--api-key", key, "--header", f"X-Gateway-Token: {header}"], str(tmp_path))
    run_dir = str(tmp_path / "r")
    _check_ok(p, run_dir)
    assert os.path.exists(
        os.path.join(run_dir, "report", "report.html")
    )  # the report was written, and searched
    basic = base64.b64encode(f"alice:{password}".encode()).decode()
    assert (
        _leaks(
            run_dir,
            p.stdout + p.stderr,
            {"api key": key, "header": header, "password": password, "basic token": basic},
        )
        == []
    )
    with open(os.path.join(run_dir, "command.json")) as fh:
        assert "X-Gateway-Token: ***" in fh.read()  # the header is named, its value masked


@pytest.mark.timeout(240)
def test_url_userinfo_is_sent_as_basic_auth(tmp_path) -> None:
    password = f"p@ss:{secrets.token_hex(6)}"  # percent-encoded in the URL, as curl takes it
    basic = base64.b64encode(f"alice:{password}".encode()).decode()
    with start_simulator(
        ["--fixed", "--ttft-ms", "2", "--itl-ms", "1", "--require-header", f"Authorization: Basic {basic}"]
    ) as sim:
        host = sim.url.replace(
            "http://", "http://alice:" + password.replace("@", "%40").replace(":", "%3A") + "@"
        )
        p = _run(["--host", host], str(tmp_path))
    run_dir = str(tmp_path / "r")
    _check_ok(p, run_dir)
    assert (
        _leaks(run_dir, p.stdout + p.stderr, {"password": password.split(":")[1], "basic token": basic}) == []
    )


@pytest.mark.timeout(240)
def test_metrics_elsewhere_gets_its_own_url_and_header(tmp_path) -> None:
    token = f"m-{secrets.token_hex(8)}"
    sim_args = ["--fixed", "--ttft-ms", "2", "--itl-ms", "1"]
    with (
        start_simulator(sim_args) as server,
        start_simulator([*sim_args, "--require-header", f"X-Metrics-Token: {token}"]) as prom,
    ):
        p = _run(
            [
                "--host",
                server.url,
                "--server-metrics",
                prom.url + "/metrics",
                "--metrics-header",
                f"X-Metrics-Token: {token}",
            ],
            str(tmp_path),
        )
    run_dir = str(tmp_path / "r")
    _check_ok(p, run_dir, served=0)  # the other server's counters: it served none of the load
    assert _leaks(run_dir, p.stdout + p.stderr, {"metrics token": token}) == []


@pytest.mark.timeout(240)
def test_plain_locust_sends_url_userinfo_and_writes_no_password(tmp_path) -> None:
    password = f"pw-{secrets.token_hex(6)}"
    basic = base64.b64encode(f"al:{password}".encode()).decode()
    out = str(tmp_path / "plain")
    with start_simulator(
        ["--fixed", "--ttft-ms", "2", "--itl-ms", "1", "--require-header", f"Authorization: Basic {basic}"]
    ) as sim:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                "locustfiles/chat.py",
                "--headless",
                "-u",
                "2",
                "-r",
                "10",
                "-t",
                "60s",
                "--host",
                sim.url.replace("http://", f"http://al:{password}@"),
                "--num-prompts",
                "8",
                "--input-len",
                "16",
                "--output-len",
                "4",
                "--results-dir",
                out,
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert p.returncode == 0, p.stderr[-2000:]
    with open(os.path.join(out, "result.json")) as fh:
        assert json.load(fh)["completed"] == 8
    with open(os.path.join(out, "run_meta.json")) as fh:
        assert json.load(fh)["host"] == sim.url
    assert _leaks(out, p.stdout + p.stderr, {"password": password, "basic token": basic}) == []


class _Echo(http.server.BaseHTTPRequestHandler):
    """Lists one model; answers every POST 500 with the request's own headers in the error (a debugging proxy)."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self._send(200, {"data": [{"id": "m"}]})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(500, {"error": {"message": f"upstream refused: {dict(self.headers)}"}})

    def _send(self, status: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.timeout(240)
def test_an_error_that_echoes_the_credentials_is_recorded_without_them(tmp_path) -> None:
    key, header = f"key-{secrets.token_hex(8)}", f"gw-{secrets.token_hex(8)}"
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    out = str(tmp_path / "plain")
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "locust",
                "-f",
                "locustfiles/chat.py",
                "--headless",
                "-u",
                "1",
                "-r",
                "10",
                "-t",
                "60s",
                "--host",
                f"http://127.0.0.1:{srv.server_port}",
                "--model",
                "m",
                "--num-prompts",
                "3",
                "--results-dir",
                out,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env={
                **os.environ,
                "VLLM_LOCUST_API_KEY": key,
                "VLLM_LOCUST_EXTRA_HEADERS": json.dumps({"X-Gateway-Token": header}),
            },
        )
    finally:
        srv.shutdown()
    with open(os.path.join(out, "result.json")) as fh:
        assert json.load(fh)["failed"] == 3, p.stderr[-2000:]
    with open(os.path.join(out, "records.jsonl")) as fh:
        assert (
            "upstream refused" in fh.read()
        )  # the server's words are kept, its echo of the credentials is not
    # the server's answer is cut inside the header's value: not even its first characters are kept
    assert _leaks(out, p.stdout + p.stderr, {"api key": key[:8], "header": header[:8]}) == []
