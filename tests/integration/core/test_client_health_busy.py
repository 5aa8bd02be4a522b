"""A busy machine, made for real: two processes spin on the core of a process that runs the health sampler.
Its loop lags, by waiting for a CPU: the verdict names the machine, not our client (no "client-bound", no "add
workers"). Bounded: the spinners end themselves after the run and are ended by their PID; ~5 s in all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vllm_users.measure import client_verdict as cv
from vllm_users.measure import health
from vllm_users.measure.health import summarize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.mark.skipif(
    not os.path.exists(health.SCHEDSTAT), reason="no schedstat on this kernel: the cause is not told"
)
def test_other_processes_on_our_core_make_a_busy_machine_not_a_client_bound_run() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "tests.integration.core.health_scenarios", "machine_busy", "3"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    h = summarize({"w": out["samples"]})
    row = h["workers"]["w"]
    # the evidence: the loop lagged, and waiting for a CPU explains that lag
    assert row["loop_lag_p99_ms"] > cv.LOOP_LAG_P99_MS, row
    assert row["lag_runq_share"] >= cv.RUNQ_SHARE_BUSY, row
    assert row["cpu_mean"] is not None and row["cpu_mean"] < cv.CPU_BOUND_FRACTION, row
    assert row["verdict"] == h["verdict"] == "machine_busy" and h["client_bound"] is False, row
    assert len(out["spinners"]) == 2 and not any(_spinning(pid) for pid in out["spinners"])


def _spinning(pid: int) -> bool:
    """Whether a spinner is still there (the scenario's process ends and reaps them by PID before it exits)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"sched_setaffinity" in fh.read()
    except OSError:
        return False
