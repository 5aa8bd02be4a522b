"""The api_server_bound rule on labelled synthetic breakdowns: it fires where the API server (time outside vLLM's
engine histograms) dominates, and stays silent on an engine-queue-bound run, a healthy one, a client-bound one and
one whose breakdown is absent (false alarms as well as misses)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestration.report import diagnose as dg
from orchestration.report.api_server import (
    API_SERVER_MIN_MS,
    API_SERVER_SHARE_MIN,
    TPOT_EXTRA_MIN_MS,
    TPOT_OVER_ENGINE_MIN,
    api_server_bound,
)
from orchestration.report.postprocess import RunData
from vllm_users.measure.latency_breakdown import ClientLatency, latency_breakdown
from vllm_users.measure.server_counters import LoadCounters


def _after(
    queue_ms: float,
    engine_ms: float,
    n: int = 100,
    tpot_ms: float | None = None,
    prefill_ms: float | None = None,
) -> dict[str, float]:
    """One server's /metrics after the load (before it: nothing), as parse_metrics gives it; the prefill
    histogram only where `prefill_ms` is given (vLLM exports it, the simulator does not)."""
    v = {
        "vllm:request_queue_time_seconds_sum": queue_ms * n / 1e3,
        "vllm:request_queue_time_seconds_count": float(n),
        "vllm:request_queue_time_seconds_bucket|+Inf": float(n),
        "vllm:time_to_first_token_seconds_sum": engine_ms * n / 1e3,
        "vllm:time_to_first_token_seconds_count": float(n),
        "vllm:time_to_first_token_seconds_bucket|+Inf": float(n),
    }
    if prefill_ms is not None:
        v |= {
            "vllm:request_prefill_time_seconds_sum": prefill_ms * n / 1e3,
            "vllm:request_prefill_time_seconds_count": float(n),
            "vllm:request_prefill_time_seconds_bucket|+Inf": float(n),
        }
    if tpot_ms is not None:
        v |= {
            "vllm:request_time_per_output_token_seconds_sum": tpot_ms * n / 1e3,
            "vllm:request_time_per_output_token_seconds_count": float(n),
            "vllm:request_time_per_output_token_seconds_bucket|+Inf": float(n),
        }
    return v


def _run(
    name: str,
    client_ttft_ms: float,
    queue_ms: float,
    engine_ms: float,
    *,
    lag_ms: float | None = 1.0,
    client_tpot_ms: float | None = None,
    engine_tpot_ms: float | None = None,
    prefill_ms: float | None = None,
    **result: Any,
) -> RunData:
    client = ClientLatency(
        100, client_ttft_ms, client_ttft_ms, client_tpot_ms, client_tpot_ms, lag_ms, lag_ms
    )
    after = _after(queue_ms, engine_ms, tpot_ms=engine_tpot_ms, prefill_ms=prefill_ms)
    block = latency_breakdown([LoadCounters("http://s/metrics", {}, after)], client)
    return RunData(f"/x/{name}", name, {"latency_breakdown": block, **result}, "records")


# (label, run, fires): runs whose cause is known
CASES = [
    # the shape: ~95 ms above the engine at 256 streams, most of a short TTFT
    ("api_server_bound", _run("api", 150.0, 10.0, 50.0), True),
    # TTFT dominated by the engine's own queue: the rest is small, engine tuning is the answer
    ("engine_queue_bound", _run("queue", 800.0, 760.0, 795.0), False),
    ("healthy", _run("healthy", 22.0, 5.0, 20.0), False),
    # a large rest but less than half of a long TTFT (the engine is most of it)
    ("rest_under_half", _run("under", 400.0, 250.0, 300.0), False),
    # most of the TTFT, but below the floor of milliseconds
    ("rest_under_floor", _run("floor", 15.0, 1.0, 3.0), False),
    # the rest is our client's loop lag, not the API server's
    ("our_loop_lag", _run("lag", 150.0, 10.0, 50.0, lag_ms=95.0), False),
    # the client was the bottleneck: its own finding, not this one
    ("client_bound", _run("cb", 150.0, 10.0, 50.0, client_bound=True), False),
    # TTFT share small (the 444 ms TTFT, 95 ms rest) but TPOT 2x the engine's: the API server's one loop
    (
        "tpot_above_engine",
        _run("tpot", 444.0, 300.0, 349.0, client_tpot_ms=40.0, engine_tpot_ms=20.0),
        True,
    ),
    ("tpot_close", _run("tpot-ok", 444.0, 300.0, 349.0, client_tpot_ms=21.0, engine_tpot_ms=20.0), False),
    # vLLM 0.26 on an H100 at 1,024 streams (docs/benchmarks.md): its TTFT histogram 7.3 s of a client's 8.8 s,
    # but the engine core's queue 0.03 ms and prefill 42 ms: the histogram's clock ran in the overloaded API
    # server. Judged by the TTFT histogram alone the rest is 17 %; by the engine core's stamps 99 %
    ("api_server_inside_the_ttft_clock", _run("clock", 8824.5, 0.03, 7343.5, prefill_ms=41.5), True),
    # engine-bound with both stamps: queue + prefill are nearly all of the histogram (a step's wait is not)
    ("engine_bound_with_core_stamps", _run("core", 800.0, 700.0, 790.0, prefill_ms=60.0), False),
    # the engine core's stamps exported, a healthy short TTFT: the part outside them is under the floor
    ("healthy_with_core_stamps", _run("core-ok", 22.0, 0.1, 20.0, prefill_ms=15.0), False),
]


@pytest.mark.parametrize(("label", "run", "fires"), CASES, ids=[c[0] for c in CASES])
def test_labelled_breakdowns(label: str, run: RunData, fires: bool) -> None:
    got = api_server_bound(run)
    assert bool(got) == fires, label
    if fires:
        (f,) = got
        assert f.rule == "api_server_bound" and f.run == run.name and f.severity == "warning"
        assert "--api-server-count" in f.action and "engine tuning" in f.action
    # through the whole diagnosis too: it is one of the run rules
    assert (("api_server_bound", run.name) in {(f.rule, f.run) for f in dg.diagnose([run])}) == fires


def test_evidence_says_each_part() -> None:
    (f,) = api_server_bound(_run("api", 150.0, 10.0, 50.0))
    assert f.evidence == (
        "client mean TTFT 150.0 ms; engine TTFT 50.0 ms (queue 10.0 ms); the rest 100.0 ms, less our loop lag p50 "
        "1.0 ms: API server + network 99.0 ms = 66%"
    )
    assert f"{API_SERVER_SHARE_MIN:.0%}" in f.threshold and f"{API_SERVER_MIN_MS:g} ms" in f.threshold
    assert f"{TPOT_OVER_ENGINE_MIN:g} x" in f.threshold and f"{TPOT_EXTRA_MIN_MS:g} ms" in f.threshold


def test_evidence_with_the_engine_core_stamps() -> None:
    (f,) = api_server_bound(_run("clock", 8824.5, 0.03, 7343.5, prefill_ms=41.5))
    assert "engine TTFT 7343.5 ms (queue 0.0 ms, prefill 41.5 ms)" in f.evidence
    assert (
        "the rest 1481.0 ms and 7302.0 ms of the engine TTFT outside the engine core, less our loop lag p50 "
        "1.0 ms: API server + network 8782.0 ms = 100%"
    ) in f.evidence


def test_absent_breakdown_gives_nothing() -> None:
    assert api_server_bound(RunData("/x/a", "a", {}, "records")) == []
    assert api_server_bound(RunData("/x/a", "a", {"latency_breakdown": None}, "records")) == []
    # a server without the engine's TTFT histogram: no rest, no verdict (never a rest of the whole TTFT)
    client = ClientLatency(100, 150.0, 150.0, None, None, 1.0, 1.0)
    block = latency_breakdown([LoadCounters("http://s/metrics", {}, {})], client)
    assert api_server_bound(RunData("/x/b", "b", {"latency_breakdown": block}, "records")) == []


def test_several_urls_judged_on_their_sum() -> None:
    client = ClientLatency(100, 150.0, 150.0, None, None, 1.0, 1.0)
    loads = [
        LoadCounters("http://a/metrics", {}, _after(10.0, 50.0)),  # alone: 99 ms of 150 outside the engine
        LoadCounters("http://b/metrics", {}, _after(100.0, 140.0)),  # alone: 9 ms
    ]
    block = latency_breakdown(loads, client)
    # together: engine TTFT 95 ms, 54 ms outside it = 36 %: under half
    assert block is not None and block["combined"]["ttft"]["api_server_mean_ms"] == pytest.approx(54.0)
    assert api_server_bound(RunData("/x/m", "m", {"latency_breakdown": block}, "records")) == []
