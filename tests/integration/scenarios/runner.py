"""Run `vllm-locust run` against the embedded simulator (through the core tests' CLI helper)."""

from __future__ import annotations

import os
from typing import Any

from tests.integration.core.helpers import CliRun, cli
from vllm_users.exit_codes import CLIENT_BOUND, OK

TIMEOUT_S = 240


def vllm_locust(tmp_path: Any, *args: str, name: str = "run", workers: int = 1) -> CliRun:
    """`vllm-locust run ARGS --workers N --output-dir tmp --run-name NAME --quiet --no-report`; no Traceback."""
    argv = [*args, "--quiet"] + ([] if "--workers" in args else ["--workers", str(workers)])
    run = cli(argv, str(tmp_path), timeout=TIMEOUT_S, name=name)
    assert "Traceback" not in run.err + run.out, run.err[-3000:]
    return run


def succeeded(run: CliRun) -> bool:
    """Exit 0, or 5 (client-bound: a loaded test machine) with no failed request."""
    done = os.path.exists(os.path.join(run.run_dir, "result.json"))
    return run.rc in (OK, CLIENT_BOUND) and done and run.result["failed"] == 0
