"""Run `vllm-locust run` in a subprocess against the embedded simulator and read what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 240


@dataclass
class Run:
    """The finished command: exit code, output, and the run directory's result and records."""

    rc: int
    out: str
    err: str
    run_dir: str

    @property
    def result(self) -> dict[str, Any]:
        """result.json of the run."""
        with open(os.path.join(self.run_dir, "result.json")) as fh:
            return json.load(fh)

    @property
    def records(self) -> list[dict[str, Any]]:
        """records.jsonl of the run."""
        with open(os.path.join(self.run_dir, "records.jsonl")) as fh:
            return [json.loads(line) for line in fh if line.strip()]


def vllm_locust(tmp_path: Any, *args: str, name: str = "run", workers: int = 1) -> Run:
    """`vllm-locust run ARGS --workers N --output-dir tmp --run-name NAME --quiet --no-report`."""
    cmd = [sys.executable, "-m", "orchestration.cli", "run", *args, "--output-dir", str(tmp_path),
           "--run-name", name, "--quiet", "--no-report"]  # fmt: skip
    if "--workers" not in args:
        cmd += ["--workers", str(workers)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    run = Run(p.returncode, p.stdout, p.stderr, os.path.join(str(tmp_path), name))
    assert "Traceback" not in p.stderr + p.stdout, p.stderr[-3000:]
    return run


def succeeded(run: Run) -> bool:
    """Exit 0, or 5 (client-bound: a loaded test machine) with no failed request."""
    from vllm_users.exit_codes import CLIENT_BOUND, OK

    return (
        run.rc in (OK, CLIENT_BOUND)
        and os.path.exists(os.path.join(run.run_dir, "result.json"))
        and run.result["failed"] == 0
    )
