"""`vllm-locust run --endpoint embeddings|rerank|score|responses` against the embedded simulator:
exact token counts, E2EL present and TTFT absent for pooling, TTFT and usage tokens for Responses; bad
combinations exit 2 before any load."""

from __future__ import annotations

import pytest

from tests.integration.scenarios.test_inputs_and_presets import _usage_error
from vllm_users.measure.record import read_records

from .runner import succeeded, vllm_locust

N = 12


@pytest.mark.parametrize(
    ("endpoint", "extra", "per_request"),
    [
        (
            "embeddings",
            ("--embed-batch", "3"),
            3 * 16,
        ),  # three inputs of 16 tokens (the simulator adds no BOS)
        ("rerank", ("--rerank-docs", "2"), 2 * (16 + 16)),  # each pair: query + document
        ("score", ("--rerank-docs", "2"), 2 * (16 + 16)),
    ],
)
def test_pooling_endpoints(tmp_path, endpoint: str, extra: tuple[str, ...], per_request: int) -> None:
    run = vllm_locust(
        tmp_path,
        "--endpoint",
        endpoint,
        *extra,
        "--input-len",
        "16",
        "--num-prompts",
        str(N),
        "-u",
        "2",
        name=endpoint,
    )
    assert succeeded(run), run.err[-2000:]
    res = run.result
    assert res["completed"] == N and res["total_input_tokens"] == N * per_request
    assert res["total_output_tokens"] is None and res["output_throughput"] is None
    assert res["mean_e2el_ms"] > 0 and "mean_ttft_ms" not in res and "mean_itl_ms" not in res
    assert res["input_throughput"] == pytest.approx(res["total_input_tokens"] / res["duration"])
    recs, bad = read_records(f"{run.run_dir}/records.jsonl")
    assert (
        bad == 0 and {r.endpoint for r in recs} == {endpoint} and all(r.output_tokens is None for r in recs)
    )
    assert {r.scenario for r in recs} == {"rerank" if endpoint == "score" else endpoint}


def test_responses_endpoint_streams_like_chat(tmp_path) -> None:
    run = vllm_locust(
        tmp_path,
        "--endpoint",
        "responses",
        "--input-len",
        "16",
        "--output-len",
        "6",
        "--ignore-eos",
        "--num-prompts",
        str(N),
        "-u",
        "2",
        name="responses",
    )
    assert succeeded(run), run.err[-2000:]
    res = run.result
    assert (
        res["completed"] == N
        and res["total_output_tokens"] == N * 6
        and res["tokens_estimated_requests"] == 0
    )
    assert res["mean_ttft_ms"] > 0 and res["mean_tpot_ms"] > 0 and "missing_done_requests" not in res
    recs, _ = read_records(f"{run.run_dir}/records.jsonl")
    # every stream whole: each chunk timed, or (read late on a busy box) all 6 counted as delivered at once;
    # most timed chunk by chunk
    at_once = [(r.extra or {}).get("chunks_at_once") for r in recs]
    assert all(r.endpoint == "responses" for r in recs)
    assert all(len(r.chunk_times_us) == 6 or n == 6 for r, n in zip(recs, at_once, strict=True))
    assert sum(len(r.chunk_times_us) == 6 for r in recs) > len(recs) / 2


def test_bad_combinations_exit_2(tmp_path) -> None:
    line = _usage_error(tmp_path, "--endpoint", "embeddings", "--scenario", "tools", "--num-prompts", "2")
    assert "scenario 'tools' cannot use --endpoint embeddings" in line
    line = _usage_error(tmp_path, "--endpoint", "bogus", "--num-prompts", "2")
    assert "--endpoint" in line


def test_responses_reasoning_gives_ttfa(tmp_path) -> None:
    run = vllm_locust(
        tmp_path,
        "--endpoint",
        "responses",
        "--sim-args",
        "--fixed --ttft-ms 40 --itl-ms 10 --reasoning-tokens 4",
        "--input-len",
        "16",
        "--output-len",
        "10",
        "--ignore-eos",
        "--num-prompts",
        "6",
        "-u",
        "2",
        name="think",
    )
    assert succeeded(run), run.err[-2000:]
    res = run.result
    assert res["total_reasoning_tokens"] == 6 * 4 and res["total_answer_tokens"] == 6 * 6
    assert res["reasoning_tokens_estimated_requests"] == 0  # from response.completed's output_tokens_details
    # the simulator's schedule is exact and a reader can only be late: lower bounds on the schedule hold on a busy
    # machine (not on TTFT + 4 steps: a late first read shortens the gap after it)
    assert res["median_ttft_ms"] >= 39.5 and res["median_ttfa_ms"] >= 40 + 4 * 10 - 0.5
    assert res["median_ttfa_ms"] > res["median_ttft_ms"]
