"""`vllm-locust run` killed hard (SIGKILL, no handler runs): its simulator and master do not outlive it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from orchestration.launch.ports import free_port
from tests.integration.core.helpers import wait_streaming


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _sim_pid(out_path: str, timeout: float = 60) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(out_path) as fh:
            for line in fh:
                if "embedded simulator at" in line and "(pid " in line:
                    return int(line.rsplit("(pid ", 1)[1].rstrip(")\n"))
        time.sleep(0.1)
    raise AssertionError("the run never printed its simulator's pid")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux only (prctl)")
@pytest.mark.timeout(120)
@pytest.mark.parametrize("web_ui", [False, True], ids=["headless", "web-ui"])
def test_sigkilled_run_leaves_no_simulator_or_master(tmp_path, web_ui: bool) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run.out"
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--users",
        "4",
        "--workers",
        "1",
        "--run-time",
        "60s",
        "--output-len",
        "16",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "r",
        "--no-report",
    ]
    if web_ui:
        cmd += ["--web-ui", "--web-port", str(free_port())]
    with open(out, "w") as fh:
        parent = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
    sim = master = 0
    try:
        sim = _sim_pid(str(out))
        run_dir = str(tmp_path / "r")
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(run_dir, "pids.json")) and time.time() < deadline:
            time.sleep(0.1)
        with open(os.path.join(run_dir, "pids.json")) as fh:
            master = json.load(fh)["master"]
        if not web_ui:
            wait_streaming(run_dir, ok=5)
        assert _alive(sim) and _alive(master)
        parent.kill()  # SIGKILL: no signal handler, no finally, no atexit
        parent.wait()
        deadline = time.time() + 30
        while (_alive(sim) or _alive(master)) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(sim), "the simulator outlived its run"
        assert not _alive(master), "the master outlived its run"
    finally:
        for pid in (sim, master):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
