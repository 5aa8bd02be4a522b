"""`vllm-locust sweep-server` on the simulator: a server per point (flag and env parameters), startup times,
a failed start recorded as data, the server stopped by its process group each time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from orchestration.launch.ports import free_port


def _port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.timeout(400)
def test_sweep_server_on_the_simulator(tmp_path) -> None:
    port = free_port()
    serve = f"{sys.executable} -m vllm_sim --port {port} --fixed --ttft-ms 10"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "sweep-server",
            "--serve-cmd",
            serve,
            "--param",
            "max-num-seqs=0,8",
            "--param",
            "env:VLLM_LOCUST_SIM_ITL_MS=2,6",
            "--health-timeout",
            "60",
            "--host",
            f"http://127.0.0.1:{port}",
            "--users",
            "2",
            "--num-prompts",
            "16",
            "--output-len",
            "8",
            "--ignore-eos",
            "--workers",
            "1",
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "ss",
        ],
        capture_output=True,
        text=True,
        timeout=380,
    )
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]  # two points could not start: exit 1
    with open(tmp_path / "ss" / "sweep.json") as fh:
        doc = json.load(fh)
    steps = doc["steps"]
    assert [s["params"] for s in steps] == [
        {"max-num-seqs": "0", "env:VLLM_LOCUST_SIM_ITL_MS": "2"},
        {"max-num-seqs": "0", "env:VLLM_LOCUST_SIM_ITL_MS": "6"},
        {"max-num-seqs": "8", "env:VLLM_LOCUST_SIM_ITL_MS": "2"},
        {"max-num-seqs": "8", "env:VLLM_LOCUST_SIM_ITL_MS": "6"},
    ]
    failed, ran = steps[:2], steps[2:]
    for s in failed:  # --max-num-seqs 0 is refused by the simulator: a failed start, recorded
        assert not s["started"] and "exited" in s["error"] and s["verdict"] == "failed start"
        assert os.path.exists(os.path.join(s["run_dir"], "server.log"))
    for s in ran:
        assert s["started"] and 0 < s["startup_s"] < 60 and s["completed"] == 16
        log = open(os.path.join(s["run_dir"], "server.log")).read()
        assert "--max-num-seqs 8" in log.splitlines()[0]
    # the env parameter reached the server: TPOT follows its ITL
    assert ran[0]["tpot_p50_ms"] == pytest.approx(2.0, abs=1.0) and ran[1]["tpot_p50_ms"] == pytest.approx(
        6.0, abs=1.5
    )
    assert all(s["server_exit_code"] is not None for s in steps)  # every server was stopped
    assert _port_closed(port)
    html = open(tmp_path / "ss" / "report" / "report.html").read()
    assert "failed start" in html and "startup s" in html
    assert "failed start: " in p.stdout  # the point's row of the one table, with its error


@pytest.mark.timeout(120)
def test_sigterm_while_a_server_starts_stops_it(tmp_path) -> None:
    # a server that never answers /health, in its own session: SIGTERM to sweep-server must not orphan it
    marker = tmp_path / "server.pid"
    serve = f"{sys.executable} -c \"import os,time; open('{marker}','w').write(str(os.getpid())); time.sleep(300)\""
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "sweep-server",
            "--serve-cmd",
            serve,
            "--param",
            "max-num-seqs=4,8",
            "--health-timeout",
            "200",
            "--stop-grace",
            "2",
            "--host",
            f"http://127.0.0.1:{free_port()}",
            "--users",
            "1",
            "--num-prompts",
            "1",
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "ss",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    for _ in range(300):
        if marker.exists() and marker.read_text():
            break
        time.sleep(0.1)
    server_pid = int(marker.read_text())
    p.terminate()
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 130, out[-3000:]
    assert "interrupted" in out
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # stopped by its process group (SIGTERM, then SIGKILL after --stop-grace)
            os.kill(server_pid, 0)
            time.sleep(0.1)
    with open(tmp_path / "ss" / "sweep.json") as fh:
        assert json.load(fh)["steps"] == []  # no point finished; the file is still written
