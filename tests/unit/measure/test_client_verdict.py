"""The client-health verdict on labelled cases whose cause is known: our CPU saturated, our code blocking the
loop, other load on the machine, healthy, too short. No false finding, no missed cause."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import gevent
import pytest

from vllm_users.measure import client_verdict as cv
from vllm_users.measure.health import HealthSampler, bound, summarize

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "health_cases.json")
# recorded with tests/integration/core/health_scenarios.py --record (each case in its own process, pinned)
CASES: dict[str, Any] = json.load(open(DATA))["cases"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_recorded_cases_get_their_cause(case: str) -> None:
    """Each recorded case, through summarize as the master runs it: the known cause, and client_bound only for
    our CPU or our code."""
    want = CASES[case]["cause"]
    h = summarize({"w": CASES[case]["samples"]})
    row = h["workers"]["w"]
    assert row["verdict"] == want == h["verdict"], row
    assert (
        row["client_bound"]
        is h["client_bound"]
        is {"ok": False, "machine_busy": False, "too_short": None}.get(want, True)
    )


def test_the_busy_machine_is_not_called_client_bound() -> None:
    """The recorded busy machine: lag over the threshold at a few % CPU, all of it waiting for a CPU."""
    row = summarize({"w": CASES["machine_busy"]["samples"]})["workers"]["w"]
    assert row["loop_lag_p99_ms"] > cv.LOOP_LAG_P99_MS and row["cpu_mean"] < 0.2
    assert row["lag_runq_share"] >= cv.RUNQ_SHARE_BUSY
    assert row["client_bound"] is False and "add workers" not in cv.line(row["verdict"])
    assert cv.line(row["verdict"]).startswith("MACHINE BUSY") and "free the machine" in cv.line(
        row["verdict"]
    )


# Summary rows of real runs (their recorded evidence), with the cause we know.
ROWS = [
    # a vision run beside a vLLM server: 3 % worker CPU, the lag explained by the run queue
    ({"cpu_mean": 0.03, "loop_lag_p99_ms": 16.8, "lag_runq_share": 0.80}, "machine_busy"),
    # docs/benchmarks.md: 16 busy-looping processes beside 4 workers on 16 cores
    ({"cpu_mean": 0.16, "loop_lag_p99_ms": 10.4, "lag_runq_share": 1.00}, "machine_busy"),
    # docs/benchmarks.md: --tokenizer prompts built in the loop (our code), 2 workers
    ({"cpu_mean": 0.70, "loop_lag_p99_ms": 28.2, "lag_runq_share": 0.02}, "loop_blocked"),
    # a worker at a full core (the old rule's own case)
    ({"cpu_mean": 0.97, "loop_lag_p99_ms": 30.0, "lag_runq_share": 0.1}, "cpu_saturated"),
    ({"cpu_mean": 0.21, "loop_lag_p99_ms": 1.06, "lag_runq_share": None}, "ok"),
]


@pytest.mark.parametrize(("row", "want"), ROWS)
def test_rows_of_real_runs(row: dict[str, Any], want: str) -> None:
    assert cv.classify(row) == want


def test_thresholds_at_their_edges() -> None:
    base = {"cpu_mean": 0.2, "loop_lag_p99_ms": 1.0, "lag_runq_share": None, "loop_lag_span_s": 5.0}
    assert cv.classify(base) == "ok"
    assert cv.classify(base | {"cpu_mean": cv.CPU_BOUND_FRACTION}) == "ok"
    assert cv.classify(base | {"cpu_mean": cv.CPU_BOUND_FRACTION + 0.001}) == "cpu_saturated"
    lag = base | {"loop_lag_p99_ms": cv.LOOP_LAG_P99_MS + 0.1}
    assert cv.classify(base | {"loop_lag_p99_ms": cv.LOOP_LAG_P99_MS}) == "ok"
    assert cv.classify(lag | {"lag_runq_share": cv.RUNQ_SHARE_BUSY}) == "machine_busy"
    assert cv.classify(lag | {"lag_runq_share": cv.RUNQ_SHARE_BUSY - 0.01}) == "loop_blocked"
    assert cv.classify(lag) == "loop_lag"  # no run-queue figures: the cause is not claimed
    # a loop thread never idle on a shared core (less than a core to be had): saturated when the lag was its own
    never_idle = lag | {"cpu_mean": 0.6, "loop_busy_share": 0.95}
    assert cv.classify(never_idle | {"lag_runq_share": 0.2}) == "cpu_saturated"
    assert cv.classify(never_idle | {"lag_runq_share": 0.8}) == "machine_busy"
    # too short: probes over less than MIN_JUDGE_S, or no CPU figure
    assert cv.classify(lag | {"lag_runq_share": 0.0, "loop_lag_span_s": cv.MIN_JUDGE_S - 0.01}) == "too_short"
    assert cv.classify(base | {"cpu_mean": None}) == "too_short"
    assert cv.classify(base | {"loop_lag_p99_ms": None}) == "too_short"
    assert cv.classify(base | {"loop_lag_p99_ms": None, "cpu_mean": 0.95}) == "cpu_saturated"


def test_the_runs_verdict_over_workers() -> None:
    """The run: its workers' most severe verdict; client_bound True, False, or None where not judged."""
    assert (cv.overall(["ok", "machine_busy"]), cv.client_bound_of(["ok", "machine_busy"])) == (
        "machine_busy",
        False,
    )
    assert (cv.overall(["too_short", "loop_blocked"]), cv.client_bound_of(["too_short", "loop_blocked"])) == (
        "loop_blocked",
        True,
    )
    assert (cv.overall(["ok", "too_short"]), cv.client_bound_of(["ok", "too_short"])) == ("too_short", None)
    assert (cv.overall([]), cv.client_bound_of([])) == (None, None)
    assert summarize({})["client_bound"] is None and summarize({})["verdict"] is None


def _light(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        gevent.sleep(0.01)


def test_a_short_run_has_its_cpu_and_says_too_short() -> None:
    """1.2 s, shorter than the loop probes' warm-up: the CPU over the run is measured (from the process's CPU
    times at start and stop, the same as the process's own clock says), the lag is not, and the verdict says so."""
    hs = HealthSampler()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    hs.start()
    _light(1.2)
    hs.stop()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    s = hs.take()
    assert hs.take().get("wall_s") is None  # the run was taken whole, once
    row = summarize({"w": s})["workers"]["w"]
    # the sampler's window lies inside ours, which adds only start() and stop()
    assert row["run_s"] == pytest.approx(wall, abs=0.01) and row["cpu_mean"] is not None
    assert row["cpu_mean"] * row["run_s"] == pytest.approx(cpu, abs=0.01)
    assert row["cpu_mean"] < cv.CPU_BOUND_FRACTION
    assert row["loop_lag_p99_ms"] is None and row["loop_lag_span_s"] is None  # absent, not 0
    assert row["verdict"] == "too_short" and row["client_bound"] is None
    assert cv.line(row["verdict"]) == "too short to judge"


def test_a_run_under_a_second_has_no_cpu_figure() -> None:
    hs = HealthSampler()
    hs.start()
    _light(0.3)
    hs.stop()
    row = summarize({"w": hs.take()})["workers"]["w"]
    assert row["run_s"] is not None and (row["cpu_mean"] is None) == (row["run_s"] < cv.MIN_JUDGE_S)
    assert row["verdict"] == "too_short"


def test_cpu_over_the_run_adds_up_across_takes_and_thinning() -> None:
    """The master sums each batch's CPU and wall seconds: the mean over the run, not over 1-s samples."""
    acc: dict[str, list[float]] = {"cpu": [], "lag_ms": []}
    for part in (
        {"cpu_s": [0.2], "wall_s": [1.0]},
        {"cpu_s": [0.9], "wall_s": [1.0]},
        {"cpu_s": [0.1], "wall_s": [0.5]},
    ):
        for k, v in part.items():
            acc.setdefault(k, []).extend(v)
        bound(acc)
    assert acc["cpu_s"] == [pytest.approx(1.2)] and acc["wall_s"] == [pytest.approx(2.5)]
    assert summarize({"w": acc})["workers"]["w"]["cpu_mean"] == pytest.approx(1.2 / 2.5)


def test_the_console_summary_names_the_cause() -> None:
    """The run-health block of the console summary, on recorded cases: the machine is named for a busy machine
    (never CLIENT-BOUND, never "add workers"), our code or our CPU for those, and a short run says so."""
    from orchestration.report.summary import format_summary
    from tests.unit.report.helpers import make_records
    from vllm_users.measure.result_builder import build_result

    def text(case: str) -> str:
        res = build_result(make_records(20), {"model_id": "m"})
        res["client_health"] = summarize({"w0": CASES[case]["samples"]})
        return format_summary(res)

    busy = text("machine_busy")
    assert "MACHINE BUSY" in busy and "CLIENT-BOUND" not in busy and "add workers" not in busy
    assert "free the machine" in busy and "of that lag waiting for a CPU" in busy
    assert "CLIENT-BOUND: our code blocks the event loop" in text("loop_blocked_call")
    sat = text("cpu_saturated")
    assert "CLIENT-BOUND: our CPU is saturated" in sat and "add workers" in sat
    short = text("too_short")
    assert "-> too short to judge" in short and "-> ok" not in short and " 0%" not in short
    assert "-> ok" in text("healthy")


def test_an_open_loop_run_counts_from_t0() -> None:
    """Open loop: the run (CPU and loop probes) starts at the agreed t0, not when the sampler is started; a run
    stopped before its t0 has no CPU figure at all."""
    hs = HealthSampler()
    t = time.perf_counter()
    hs.start(warmup_s=0.3, run_starts_in_s=0.3)
    _light(2.0)
    hs.stop()
    total = time.perf_counter() - t
    row = summarize({"w": hs.take()})["workers"]["w"]
    # a timer never fires early: the 0.3 s before t0 are not in the run
    assert 0 < row["run_s"] <= total - 0.3 + 0.001
    assert (row["cpu_mean"] is not None) == (row["run_s"] >= cv.MIN_JUDGE_S)
    assert 0 < row["loop_lag_span_s"] <= row["run_s"] + 0.001  # probes from t0 on, within the run
    early = HealthSampler()
    early.start(warmup_s=5.0, run_starts_in_s=5.0)
    _light(0.1)
    early.stop()
    gevent.sleep(0.05)  # the killed greenlet ends
    assert "wall_s" not in early.take()
