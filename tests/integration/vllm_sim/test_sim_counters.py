"""The simulator's vllm:request_success_total means what vLLM's does: a request its engine finished,
by finish reason, an error in the stream too; not a request refused before the engine (an injected 500, a 400)
nor one the client abandoned. And POST /reset_prefix_cache, vLLM's (dev mode) endpoint."""

from __future__ import annotations

import pytest

from vllm_sim import probe
from vllm_sim.launch import SimProcess, start_simulator
from vllm_users.measure.server_counters import parse_metrics

pytestmark = pytest.mark.timeout(60)
BODY = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "ignore_eos": True, "stream": True}
SUCCESS = "vllm:request_success_total"


def _success(sim: SimProcess) -> float:
    return parse_metrics(probe.request(sim.url, "/metrics").body.decode())[SUCCESS]


def _req(sim: SimProcess, fault: str | None = None, body: dict | None = None) -> probe.ProbeResult:
    return probe.request(
        sim.url,
        "/v1/chat/completions",
        body or BODY,
        headers={"X-Sim-Fault": fault} if fault else None,
        timeout=5.0,
    )


def test_request_success_counts_what_the_engine_finished(sim: SimProcess) -> None:
    before = _success(sim)
    assert _req(sim).status == 200
    assert (
        _req(sim, "inband_error:2").status == 200
    )  # the engine's error, in the stream: finished_reason error
    assert _req(sim, "zero_tokens").status == 200  # finished at once: stop
    assert _req(sim, "500").status == 500  # refused before the engine
    assert _req(sim, body={"messages": "nope"}).status == 400
    assert _success(sim) - before == 3
    text = probe.request(sim.url, "/metrics").body.decode()
    assert 'vllm:request_success_total{engine="0",finished_reason="error",model_name="sim-model"} 1.0' in text


def test_reset_prefix_cache_endpoint() -> None:
    body = {"messages": [{"role": "user", "content": " ".join(f"w{i}" for i in range(200))}], "max_tokens": 2}
    with start_simulator(["--ttft-ms", "1", "--itl-ms", "1"]) as sim:

        def hits() -> float:
            return parse_metrics(probe.request(sim.url, "/metrics").body.decode())[
                "vllm:prefix_cache_hits_total"
            ]

        probe.request(sim.url, "/v1/chat/completions", body)
        h0 = hits()
        probe.request(sim.url, "/v1/chat/completions", body)
        h1 = hits()
        assert h1 > h0  # the same prompt again: cached
        r = probe.request(sim.url, "/reset_prefix_cache", {})
        assert r.status == 200 and r.json() == {"success": True}
        probe.request(sim.url, "/v1/chat/completions", body)
        assert hits() == h1  # forgotten
        assert probe.request(sim.url, "/reset_prefix_cache").status == 405  # GET: vLLM's is a POST
        assert "Traceback" not in sim.stderr_text()
