"""A server that comes up after the run started: with --wait-for-server the preflight waits for it (one line per
wait), then the run measures as usual; without it, the run ends at once with exit 3 and one line."""

from __future__ import annotations

import threading
import time

import pytest

from orchestration.launch.ports import free_port
from tests.integration.core.helpers import CliRun, cli
from vllm_sim.launch import SimProcess, start_simulator
from vllm_users import exit_codes

pytestmark = pytest.mark.timeout(120)


def test_the_preflight_waits_for_a_server_that_starts_late(tmp_path) -> None:
    port = free_port()
    runs: list[CliRun] = []
    args = ["--host", f"http://127.0.0.1:{port}", "--num-prompts", "20", "--users", "2", "--workers", "1"]
    args += ["--output-len", "4", "--wait-for-server", "60"]
    t = threading.Thread(target=lambda: runs.append(cli(args, str(tmp_path), timeout=100)), daemon=True)
    t.start()
    time.sleep(2.0)  # the run's preflight finds the port closed first
    # started from this thread: the simulator dies with the thread that started it
    sim: SimProcess = start_simulator(["--fixed", "--ttft-ms", "2", "--itl-ms", "1", "--port", str(port)])
    try:
        t.join(100)
    finally:
        sim.proc.kill()
        sim.proc.wait()
    assert runs, "the run did not end"
    r = runs[0]
    assert r.rc == exit_codes.OK, (r.rc, r.logs()[-3000:])
    waits = [x for x in r.out.splitlines() if "waiting for http://127.0.0.1:" in x]
    assert waits and all("connection refused" in x and "left of --wait-for-server" in x for x in waits), r.out
    assert r.result["completed"] == 20


def test_without_the_wait_a_closed_port_is_one_line_and_exit_3(tmp_path) -> None:
    port = free_port()
    r = cli(["--host", f"http://127.0.0.1:{port}", "--num-prompts", "2"], str(tmp_path), timeout=60)
    assert r.rc == exit_codes.PREFLIGHT, (r.rc, r.err[-2000:])
    lines = [x for x in r.err.splitlines() if x.strip()]
    assert lines and "connection refused" in lines[-1] and "Traceback" not in r.err
