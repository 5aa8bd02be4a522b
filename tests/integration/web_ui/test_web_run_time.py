"""--run-time with --web-ui counts from the first swarm (Locust alone ignores it in UI mode)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from orchestration.launch.ports import free_port


def _wait_for_workers(base: str, n: int) -> float:
    """Wait until the UI at `base` has `n` workers connected; the deadline it used (now + 60 s)."""
    deadline = time.time() + 60
    while True:
        try:
            with urllib.request.urlopen(base + "/worker-count", timeout=5) as resp:
                if json.load(resp)["worker_count"] >= n:
                    return deadline
        except (urllib.error.URLError, OSError, ValueError):
            pass
        assert time.time() < deadline, f"the UI never came up with {n} worker(s)"
        time.sleep(0.5)


@pytest.mark.timeout(150)
def test_run_time_applies_from_the_first_swarm(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    out = tmp_path / "cli.out"
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--web-ui",
        "--web-port",
        str(port),
        "--workers",
        "1",
        "--users",
        "2",
        "--run-time",
        "6s",
        "--output-len",
        "8",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "r",
        "--no-report",
    ]
    p = subprocess.Popen(cmd, stdout=open(out, "w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    result = os.path.join(str(tmp_path), "r", "result.json")
    try:
        _wait_for_workers(base, 1)
        time.sleep(3)  # idle time before the swarm does not count
        assert not os.path.exists(result)
        form = urllib.parse.urlencode({"user_count": 2, "spawn_rate": 2}).encode()
        t_swarm = time.time()
        urllib.request.urlopen(base + "/swarm", data=form, timeout=10).read()
        while not os.path.exists(result) and time.time() < t_swarm + 60:
            time.sleep(0.2)
        assert os.path.exists(result), out.read_text()[-2000:]
        assert 5.5 < time.time() - t_swarm < 30  # stopped by --run-time (plus the drain), written as headless
        res = json.load(open(result))
        assert res["completed"] > 0 and res["timeline"][-1]["kind"] == "stop"
        assert "counts from the first swarm" in out.read_text()
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(60)


@pytest.mark.timeout(240)
def test_stopped_state_comes_with_the_final_table(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Locust's UI polls /stats/requests and stops once it reads "stopped": that response must already carry
    # the final numbers in our table, or the table stays on the last live snapshot (seen: 390 of 400)
    port = free_port()
    out = tmp_path / "cli.out"
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--web-ui",
        "--web-port",
        str(port),
        "--workers",
        "2",
        "--users",
        "8",
        "--num-prompts",
        "120",
        "--output-len",
        "8",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "r",
        "--no-report",
    ]
    p = subprocess.Popen(cmd, stdout=open(out, "w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = _wait_for_workers(base, 2)
        form = urllib.parse.urlencode({"user_count": 8, "spawn_rate": 8}).encode()
        urllib.request.urlopen(base + "/swarm", data=form, timeout=10).read()
        first_stopped = None
        written_when_stopped = False
        result = os.path.join(str(tmp_path), "r", "result.json")
        states = set()
        while first_stopped is None and time.time() < deadline + 90:
            with urllib.request.urlopen(base + "/stats/requests", timeout=10) as resp:
                doc = json.load(resp)
            states.add(doc["state"])
            if doc["state"] == "stopped":
                first_stopped = doc
                written_when_stopped = os.path.exists(result)
            time.sleep(0.05)
        assert first_stopped is not None, (states, out.read_text()[-2000:])
        assert written_when_stopped, "the UI read 'stopped' before the run directory was written"
        while not os.path.exists(result) and time.time() < deadline + 150:
            time.sleep(0.2)
        res = json.load(open(result))
        rows = {r["name"]: r for r in first_stopped["extended_stats"][0]["data"]}
        assert res["completed"] == 120
        assert rows["all"]["requests"] == 120, rows["all"]
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(60)
