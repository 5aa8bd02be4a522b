"""`--endpoint responses` against real vLLM for CPU, on the tier's normal server (`vllm_server`): streamed, its
output tokens from `response.completed`'s usage, and not streamed, without TTFT. Apart from the pooling endpoints'
file (tests/e2e/test_endpoints_real_vllm.py), whose servers are its own: scripts/run_tests.py runs the e2e files
that need the normal server and the others as two processes side by side."""

from __future__ import annotations

from tests.e2e.test_scenarios_real_vllm import run_vllm_locust
from tests.e2e.vllm_env import VllmServer

N = 8


def test_responses_streamed(vllm_server: VllmServer, tmp_path) -> None:
    out = run_vllm_locust(
        vllm_server.url,
        tmp_path,
        "responses",
        "--endpoint",
        "responses",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--ignore-eos",
        "--num-prompts",
        str(N),
        "-u",
        "2",
    )
    res = out.result
    assert (
        res["completed"] == N and res["failed"] == 0 and res["mean_ttft_ms"] > 0 and res["mean_tpot_ms"] > 0
    )
    for r in out.records:
        assert r.endpoint == "responses" and not r.tokens_estimated  # output tokens from response.completed
        assert r.output_tokens == len(r.chunk_times_us), (r.output_tokens, len(r.chunk_times_us))
    assert res["total_output_tokens"] == sum(r.output_tokens or 0 for r in out.records)
    print(
        f"\nresponses: {res['total_input_tokens']} input / {res['total_output_tokens']} output tokens (usage), "
        f"TTFT p50 {res['median_ttft_ms']:.1f} ms, TPOT p50 {res['median_tpot_ms']:.2f} ms, "
        f"E2EL p50 {res['median_e2el_ms']:.1f} ms"
    )


def test_responses_not_streamed(vllm_server: VllmServer, tmp_path) -> None:
    out = run_vllm_locust(
        vllm_server.url,
        tmp_path,
        "responses-ns",
        "--endpoint",
        "responses",
        "--no-stream",
        "--input-len",
        "16",
        "--output-len",
        "8",
        "--num-prompts",
        "4",
        "-u",
        "2",
    )
    res = out.result
    assert res["completed"] == 4 and "mean_ttft_ms" not in res and res["mean_e2el_ms"] > 0
    assert all(r.not_streamed and r.output_tokens and not r.tokens_estimated for r in out.records)
