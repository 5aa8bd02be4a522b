"""Gateway processes the tests start themselves: wait until one listens, stop it (by its own PID)."""

from __future__ import annotations

import socket
import subprocess
import time


def wait_listening(port: int, proc: subprocess.Popen[bytes], name: str, timeout: float = 15.0) -> None:
    """Return once 127.0.0.1:`port` accepts a connection; RuntimeError when `proc` exits or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on {port} within {timeout} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
