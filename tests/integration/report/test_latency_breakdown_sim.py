"""Where a TTFT goes, end to end: `vllm-locust run` against two simulators named by two --server-metrics URLs
writes one samples file per URL and result.json's latency_breakdown per URL; the load's server delays each
request outside its engine histograms (its headers, 60 ms late), so the rest up to the client's TTFT holds
that delay, and the idle one has no TTFT part at all (absent, not 0)."""

from __future__ import annotations

import os

import pytest

from tests.integration.scenarios.runner import succeeded, vllm_locust
from vllm_sim.launch import start_simulator

pytestmark = pytest.mark.timeout(180)
DELAY_MS = 60.0


def test_breakdown_per_metrics_url(tmp_path) -> None:  # type: ignore[no-untyped-def]
    delayed = ["--fault-rate-delay-headers", "1", "--fault-delay-ms", f"{DELAY_MS:g}"]
    with start_simulator(delayed) as load, start_simulator([]) as idle:
        run = vllm_locust(
            tmp_path,
            "--host",
            load.url,
            "--users",
            "4",
            "--num-prompts",
            "40",
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--server-metrics",
            load.url + "/metrics",
            "--server-metrics",
            idle.url + "/metrics",
        )
    assert succeeded(run), run.err[-3000:]
    assert os.path.exists(os.path.join(run.run_dir, "server_metrics.jsonl"))
    assert os.path.exists(os.path.join(run.run_dir, "server_metrics.1.jsonl"))
    res = run.result
    block = res["latency_breakdown"]
    assert [s["url"] for s in block["servers"]] == [load.url + "/metrics", idle.url + "/metrics"]
    busy, quiet = block["servers"]
    ttft = busy["ttft"]
    # every load request reached the engine once, after the preflight's baseline: one TTFT observation each
    assert ttft["engine"]["count"] == res["completed"] == block["client"]["requests"] == 40
    assert ttft["queue"]["count"] == 40
    assert "prefill" not in ttft  # the simulator has no prefill-time histogram: absent, never 0
    # the client's mean TTFT is the engine's plus at least the delay (and HTTP on this host: no bound on a busy box)
    assert block["client"]["ttft_mean_ms"] == pytest.approx(
        res["mean_ttft_ms"]
    )  # no warmup: the same requests
    assert ttft["rest_mean_ms"] >= DELAY_MS
    assert ttft["rest_mean_ms"] == pytest.approx(block["client"]["ttft_mean_ms"] - ttft["engine"]["mean_ms"])
    assert "ttft" not in quiet and "spec_decode" not in busy  # no load there; no speculative decoding
    assert "Where a TTFT goes" in run.out
    # both replicas summed: the idle one adds nothing
    assert block["combined"]["ttft"]["engine"]["mean_ms"] == pytest.approx(ttft["engine"]["mean_ms"])
