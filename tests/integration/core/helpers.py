"""Run the real CLI (master + worker processes) in a subprocess and read what it wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class CliRun:
    """Outcome of one `vllm-locust run`."""

    rc: int
    out: str
    err: str
    run_dir: str

    @property
    def result(self) -> dict[str, Any]:
        """The run's result.json."""
        with open(os.path.join(self.run_dir, "result.json")) as fh:
            return json.load(fh)

    def records(self) -> list[dict[str, Any]]:
        """The run's records.jsonl, decoded."""
        with open(os.path.join(self.run_dir, "records.jsonl")) as fh:
            return [json.loads(line) for line in fh if line.strip()]

    def preflight_requests(self) -> int:
        """Completion requests the preflight sent (not recorded: they are not load)."""
        with open(os.path.join(self.run_dir, "preflight.json")) as fh:
            return len(json.load(fh)["stream_attempts"])

    def logs(self) -> str:
        """Everything the master and workers printed."""
        text = self.out + self.err
        for name in sorted(os.listdir(self.run_dir)) if os.path.isdir(self.run_dir) else []:
            if name.endswith(".out") or name.endswith(".log"):
                with open(os.path.join(self.run_dir, name), errors="replace") as fh:
                    text += fh.read()
        return text


def cli(
    args: list[str],
    tmp: str,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    name: str = "run",
    prefix: list[str] | None = None,
) -> CliRun:
    """`vllm-locust run ARGS --output-dir tmp --run-name name` with a hard timeout."""
    cmd = [
        *(prefix or []),
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        *args,
        "--output-dir",
        tmp,
        "--run-name",
        name,
        "--no-report",
    ]
    run_dir = os.path.join(tmp, name)
    try:
        p = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
    except subprocess.TimeoutExpired:
        _kill_run(run_dir)  # master and workers run in their own sessions: do not leave them behind
        raise
    return CliRun(p.returncode, p.stdout, p.stderr, run_dir)


def wait_streaming(run_dir: str, ok: int = 10, timeout: float = 90) -> None:
    """Block until the run's progress file shows `ok` successful requests (a loaded machine starts slowly)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(os.path.join(run_dir, "progress.json")) as fh:
                if json.load(fh)["ok"] >= ok:
                    return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"{run_dir}: no {ok} successful requests within {timeout} s")


def _kill_run(run_dir: str) -> None:
    try:
        with open(os.path.join(run_dir, "pids.json")) as fh:
            pids = json.load(fh)
    except (OSError, ValueError):
        return
    for pid in [pids.get("master"), *pids.get("workers", [])]:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (OSError, TypeError, ValueError):
            pass


def cli_bare(
    args: list[str], timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`vllm-locust ARGS` as given (for bad-input tests)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
