"""Each diagnosis rule fires on a run crafted to trip it and stays silent on a healthy run."""

from __future__ import annotations

import pytest

from orchestration.report import diagnose as dg
from orchestration.report.postprocess import RunData, load_run
from tests.unit.report.helpers import make_records, server_samples, write_run
from vllm_users.measure.metrics import Slo
from vllm_users.measure.result_builder import build_result

META = {"model_id": "m", "users": 8}


def _run(name: str, recs, *, slo=None, **extra) -> RunData:  # type: ignore[no-untyped-def]
    res = build_result(recs, META, slo=slo)
    res.update(extra)
    return RunData(f"/x/{name}", name, res, "records")


def _healthy() -> RunData:
    r = _run("healthy", make_records(200), slo=Slo({"ttft": 100.0}), client_bound=False)
    r.result["server_metrics"] = {
        "available": True,
        "prefix_cache_hit_rate": 0.9,
        "prefix_cache_queries": 100,
        "gpu_util_mean": 95.0,
    }
    return r


def _rules(runs: list[RunData]) -> set[str]:
    return {f.rule for f in dg.diagnose(runs)}


def test_healthy_run_is_silent() -> None:
    assert dg.diagnose([_healthy()]) == []


def test_ttft_fluctuation() -> None:
    r = _run("tail", make_records(200, tail_every=20, tail_ms=3000))
    assert r.result["p99_ttft_ms"] > 3 * r.result["mean_ttft_ms"]
    f = [x for x in dg.diagnose([r]) if x.rule == "ttft_fluctuation"]
    assert f and "x mean" in f[0].evidence and f[0].action


SHARED = {"prefix_len": 80, "cache_rate": 1.0, "num_prefixes": 1}  # 80 of each ~100-token prompt shared


def test_prefix_cache_low_against_the_workloads_ceiling() -> None:
    r = _healthy()
    r.result["meta"] = {**r.result["meta"], **SHARED}
    r.result["server_metrics"]["prefix_cache_hit_rate"] = 0.2  # of a ceiling of ~80 %
    (f,) = [x for x in dg.diagnose([r]) if x.rule == "prefix_cache_low"]
    assert (
        f.severity == "warning" and "of a ceiling of 79.6%" in f.evidence and "--prefix-len 80" in f.evidence
    )
    r.result["server_metrics"]["prefix_cache_hit_rate"] = 0.7  # near the ceiling: nothing to find
    assert "prefix_cache_low" not in _rules([r])
    c = _run("client", make_records(50, cached_fraction=0.1))
    c.result["meta"].update(SHARED)
    assert c.result["prefix_cache_hit_rate"] == pytest.approx(0.1)
    assert "prefix_cache_low" in _rules([c])
    c9 = _run("c2", make_records(50, cached_fraction=0.9))
    c9.result["meta"].update(SHARED)
    assert "prefix_cache_low" not in _rules([c9])


def test_random_prompts_allow_no_reuse_so_no_cache_finding() -> None:
    """Random prompts share no prefix: a 0 % hit rate is all there is, not even an informational finding."""
    r = _healthy()
    r.result["server_metrics"]["prefix_cache_hit_rate"] = 0.0
    assert r.result["per_scenario"].keys() == {"chat"} and dg.diagnose([r]) == []
    r.result["meta"] = {**r.result["meta"], "prefix_len": 80, "cache_rate": 0.0}  # every prefix unique
    assert dg.diagnose([r]) == []


def test_trace_hit_rate_at_its_ceiling_is_no_finding() -> None:
    r = _healthy()
    r.result["server_metrics"]["prefix_cache_hit_rate"] = 0.353
    r.result["replay"] = {"expected_block_reuse": 0.354, "server_prefix_hit_rate": 0.353}
    assert dg.diagnose([r]) == []
    r.result["server_metrics"]["prefix_cache_hit_rate"] = 0.05
    assert _rules([r]) == {"prefix_cache_low"}
    r.result["replay"]["expected_block_reuse"] = (
        0.08  # a trace that allows almost nothing: nothing worth finding
    )
    assert dg.diagnose([r]) == []


def test_multi_turn_of_unknown_ceiling_fires_only_near_zero() -> None:
    r = _run("mt", make_records(64, turns=4, cached_fraction=0.0))
    assert r.result["ttft_by_turn"]
    (f,) = [x for x in dg.diagnose([r]) if x.rule == "prefix_cache_low"]
    assert "multi-turn" in f.evidence
    assert "prefix_cache_low" not in _rules([_run("mt", make_records(64, turns=4, cached_fraction=0.3))])


def test_failures_over_one_percent() -> None:
    assert "failures" in _rules([_run("f", make_records(200, fail=4))])  # 2 %
    assert "failures" not in _rules([_run("f", make_records(200, fail=1))])  # 0.5 %


def test_client_bound() -> None:
    health = {
        "client_bound": True,
        "thresholds": {"cpu_mean": 0.9, "loop_lag_p99_ms": 10},
        "workers": {"w0": {"cpu_mean": 0.97, "loop_lag_p99_ms": 30.0, "client_bound": True}},
    }
    f = [x for x in dg.diagnose([_run("cb", make_records(50), client_health=health, client_bound=True)])]
    assert f[0].rule == "client_bound" and "97%" in f[0].evidence and "add workers" in f[0].action


# one worker's recorded evidence (a result written before verdicts were kept: classified from it), the findings
CLIENT_CASES = [
    # a vision run beside a vLLM server: 3 % CPU, 80 % of the lag waiting for a CPU
    ({"cpu_mean": 0.03, "loop_lag_p99_ms": 16.8, "lag_runq_share": 0.80}, {("machine_busy", "warning")}),
    ({"cpu_mean": 0.12, "loop_lag_p99_ms": 31.2, "lag_runq_share": 0.15}, {("client_bound", "critical")}),
    ({"cpu_mean": 0.97, "loop_lag_p99_ms": 30.0, "lag_runq_share": 0.1}, {("client_bound", "critical")}),
    ({"cpu_mean": 0.05, "loop_lag_p99_ms": 31.2}, {("loop_lag", "warning")}),  # no run-queue figures
    ({"cpu_mean": 0.21, "loop_lag_p99_ms": 1.1, "lag_runq_share": None}, set()),
    (
        {"cpu_mean": 0.1, "loop_lag_p99_ms": None, "loop_lag_span_s": None},
        set(),
    ),  # too short: nothing claimed
]


@pytest.mark.parametrize(("row", "want"), CLIENT_CASES)
def test_client_findings_name_the_cause(row: dict, want: set) -> None:  # type: ignore[type-arg]
    health = {"client_bound": None, "thresholds": {}, "workers": {"w0": row}}
    f = [
        x for x in dg.diagnose([_run("c", make_records(50), client_health=health)]) if x.rule in CLIENT_RULES
    ]
    assert {(x.rule, x.severity) for x in f} == want
    for x in f:  # the machine's delay is not ours: no "add workers" for it
        assert ("add workers" in x.action) == (row.get("cpu_mean", 0) > 0.9), x
        assert ("free the machine" in x.action) == (x.rule == "machine_busy"), x


CLIENT_RULES = {"client_bound", "machine_busy", "loop_lag"}


def test_gpu_util_low_only_with_dcgm() -> None:
    r = _healthy()
    r.result["server_metrics"]["gpu_util_mean"] = 40.0
    assert "gpu_underutilized" in _rules([r])
    del r.result["server_metrics"]["gpu_util_mean"]
    assert "gpu_underutilized" not in _rules([r])


def test_slo_miss() -> None:
    r = _run("slo", make_records(200, tail_every=10, tail_ms=500), slo=Slo({"ttft": 100.0}))
    f = [x for x in dg.diagnose([r]) if x.rule == "slo_miss"]
    assert f and "ttft" in f[0].evidence


def test_throughput_plateau_across_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    low = _run("c8", make_records(200), max_concurrency=8)
    flat = _run("c32", make_records(200), max_concurrency=32)  # same throughput at 4x the concurrency
    flat.result["output_throughput"] = low.result["output_throughput"] * 1.03
    grow = _run("c32", make_records(200), max_concurrency=32)
    grow.result["output_throughput"] = low.result["output_throughput"] * 2.5
    assert "throughput_plateau" in _rules([low, flat])
    assert "throughput_plateau" not in _rules([low, grow])
    assert "throughput_plateau" not in _rules([low])


def test_rules_on_a_loaded_run_dir(tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = write_run(
        str(tmp_path / "r"),
        make_records(100, fail=5),
        samples=server_samples(hits_ratio=0.1, gpu_util=30),
        meta=SHARED,
    )
    assert {"failures", "prefix_cache_low", "gpu_underutilized"} <= _rules([load_run(d)])


def test_coalesced_chunks() -> None:
    recs = make_records(40, tokens=16)
    for r in recs:  # the server packed every 2 tokens into one chunk: 8 chunks for 16 tokens
        r.chunk_times_us = r.chunk_times_us[1::2]
    run = _run("packed", recs)
    assert run.result["chunk_token_ratio"] == pytest.approx(0.5)
    f = [x for x in dg.diagnose([run]) if x.rule == "coalesced_chunks"]
    assert f and "2.00 tokens per chunk" in f[0].evidence
    assert "coalesced_chunks" not in _rules([_run("one-per-token", make_records(40, tokens=16))])


def test_no_chunks_without_streaming() -> None:
    """An answer read as one body has one "chunk" for all its tokens: no finding about packing, not evaluated."""
    recs = make_records(40, tokens=16)
    for r in recs:
        r.not_streamed = True
        r.chunk_times_us = r.chunk_times_us[-1:]
    run = _run("no-stream", recs)
    assert run.result["not_streamed_requests"] == 40
    assert "coalesced_chunks" not in _rules([run])


def test_prompt_lengths_off() -> None:
    recs = make_records(50)
    for r in recs:
        if r.prompt_tokens is not None:
            r.prompt_tokens = 130  # input_len 100: 30 % more, no template measured
    run = _run("long", recs)
    assert run.result["input_len_check"]["ok"] is False
    found = [f for f in dg.diagnose([run]) if f.rule == "input_len_off"]
    assert found and "+30%" in found[0].evidence and found[0].severity == "critical"
    assert "input_len_off" not in _rules([_healthy()])
