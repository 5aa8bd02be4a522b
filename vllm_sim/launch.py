"""Start the simulator as a subprocess on an ephemeral port (used by the CLI and every test)."""

from __future__ import annotations

import atexit
import ctypes
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Callable
from types import TracebackType

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A Popen ``preexec_fn`` that makes the child get ``sig`` when this process dies, however it dies
    (SIGKILL included); None where prctl does not exist (then only atexit and the process group help)."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: the child only calls it

    def preexec() -> None:
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl: nobody will signal us
            os._exit(1)

    return preexec


_live: weakref.WeakSet[SimProcess] = weakref.WeakSet()


@atexit.register
def _stop_leftovers() -> None:
    """A simulator nobody stopped (an exception path, sys.exit) ends with the interpreter."""
    for sim in list(_live):
        sim.stop(timeout=2.0)


class SimProcess:
    """A running simulator process: ``.url``, ``.pid``, ``.stop()``; a context manager."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log_path: str) -> None:
        self.proc = proc
        self.url = url
        self.pid = proc.pid
        self.log_path = log_path
        self.port = int(url.rsplit(":", 1)[1])
        _live.add(self)

    def stderr_text(self) -> str:
        """Everything the simulator wrote to stderr so far (logs, tracebacks)."""
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, wait, SIGKILL if needed; return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self.proc.stdout:
            self.proc.stdout.close()
        _live.discard(self)
        return self.proc.returncode

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_simulator(
    args: list[str], timeout: float = 20, cpu: int | None = None, env: dict[str, str] | None = None
) -> SimProcess:
    """Start ``python -m vllm_sim --port 0 *args``; wait for SIM_READY (pin to ``cpu`` if given)."""
    cmd = [sys.executable, "-m", "vllm_sim", "--port", "0", *args]
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        cmd = ["taskset", "-c", str(cpu), *cmd]
    fd, log_path = tempfile.mkstemp(prefix="vllm-locust-sim-", suffix=".log")
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with os.fdopen(fd, "wb") as log:
        # the simulator's lifetime is tied to ours on every exit path: parent-death signal (even SIGKILL),
        # atexit (_stop_leftovers), and our process group (a terminal's Ctrl-C reaches it too)
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=log, env=full_env, preexec_fn=die_with_parent()
        )
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while time.monotonic() < deadline:
            if not sel.select(max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.split(b"\n"):
                if line.startswith(b"SIM_READY "):
                    return SimProcess(proc, line.split()[1].decode(), log_path)
    finally:
        sel.close()
    proc.kill()
    proc.wait()
    with open(log_path, encoding="utf-8", errors="replace") as f:
        err = f.read()
    raise RuntimeError(f"simulator did not become ready in {timeout}s: {buf.decode(errors='replace')}{err}")
