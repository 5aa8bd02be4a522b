"""A server killed mid-run: closed-loop users back off (a few attempts a second, not thousands), the result and
the summary say from when and for how long it could not be reached, and --stop-after-failing ends the run."""

from __future__ import annotations

import pytest

from tests.integration.core.helpers import cli
from tests.integration.reliability.test_server_faults import _once_streaming
from vllm_sim.launch import start_simulator
from vllm_users import exit_codes
from vllm_users.scenarios.backoff import CAP_S, FIRST_S

pytestmark = pytest.mark.timeout(150)

USERS = 8
STOP_AFTER_S = 3.0


def _attempts_within(seconds: float) -> int:
    """The most requests one backing-off user starts in `seconds` of refused connections (each takes ~0 s)."""
    n, t, pause = 1, 0.0, FIRST_S
    while t + pause <= seconds:
        t, n, pause = t + pause, n + 1, min(CAP_S, 2 * pause)
    return n


def test_a_killed_server_is_backed_off_reported_and_ends_the_run(tmp_path) -> None:
    sim = start_simulator(["--fixed", "--ttft-ms", "5", "--itl-ms", "2"])
    try:
        run_dir = str(tmp_path / "run")
        _once_streaming(run_dir, 1.0, sim.proc.kill)
        r = cli(
            ["--host", sim.url, "--users", str(USERS), "--workers", "1", "--run-time", "90"]
            + ["--output-len", "16", "--stop-after-failing", f"{STOP_AFTER_S:g}s"],
            str(tmp_path),
            timeout=120,
        )
    finally:
        sim.proc.kill()
        sim.proc.wait()
    assert r.rc == exit_codes.FAILURES, (r.rc, r.logs()[-3000:])
    res = r.result
    spans = res["server_unreachable"]
    assert len(spans) == 1, spans
    span = spans[0]
    assert span["to_end"] is True and span["for_s"] >= STOP_AFTER_S
    assert span["failures"] == res["errors_by_kind"]["connection"]
    # backed off: each user's attempts over the failing stretch (plus the master's second of totals and the
    # drain) are bounded by the back-off's schedule, whatever this machine's speed
    assert span["failures"] <= USERS * _attempts_within(span["for_s"] + 1.0), span
    stops = [m for m in res["timeline"] if m["kind"] == "stop"]
    assert stops and stops[0]["reason"] == "every request failing"
    assert "Server unreachable:" in r.out and f"for {span['for_s']:.1f} s" in r.out, r.out[-2000:]
    assert "Traceback" not in r.logs()
