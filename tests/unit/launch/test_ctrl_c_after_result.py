"""Ctrl-C while `vllm-locust run` waits for its master: before the result it cuts the run short (interrupted.json,
exit 130); after it (the web UI kept up to look at a finished run) it only ends the master: no interrupted.json."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from orchestration.launch import launcher
from vllm_users import run_dir as R
from vllm_users.measure.run_result import result_path
from vllm_users.options import Options


def _ctrl_c_while_waiting(tmp_path: str) -> bool:
    """_wait on a stand-in master that runs until SIGTERM, with one SIGINT to this process after a moment."""
    master = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        return launcher._wait(Options(), master, tmp_path, None)
    finally:
        timer.cancel()
        master.kill()
        master.wait(timeout=10)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_after_the_result_is_no_interruption(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with open(result_path(str(tmp_path)), "w") as fh:
        fh.write("{}")
    assert _ctrl_c_while_waiting(str(tmp_path)) is False
    assert not os.path.exists(R.path(str(tmp_path), R.INTERRUPTED))


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_before_the_result_interrupts(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _ctrl_c_while_waiting(str(tmp_path)) is True
    assert R.read_json_or_none(str(tmp_path), R.INTERRUPTED) == {"signal": "SIGINT"}
