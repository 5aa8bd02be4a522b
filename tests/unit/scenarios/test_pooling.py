"""Pooling endpoints: which scenarios run with which --endpoint, and what a pooling run's result and
summary say (E2EL, requests/s, input tokens/s; no output or TTFT figures: absent, not 0)."""

from __future__ import annotations

import pytest

from orchestration.report.summary import format_summary
from vllm_users.measure.metrics import peak_output_tokens_per_s
from vllm_users.measure.record import RequestRecord
from vllm_users.measure.result_fields import compute_metrics
from vllm_users.scenarios.pooling import answered_items
from vllm_users.scenarios.registry import SCENARIOS, for_endpoint


def test_chat_becomes_the_pooling_user_and_bad_combinations_name_the_scenario() -> None:
    assert for_endpoint([("chat", 1)], "embeddings") == [("embeddings", 1)]
    assert for_endpoint([("chat", 2)], "score") == [("rerank", 2)]
    assert for_endpoint([("chat", 1), ("json", 1)], "completions") == [("chat", 1), ("json", 1)]
    assert for_endpoint([("chat", 1), ("pkg.mod:Mine", 0)], "responses") == [("chat", 1), ("pkg.mod:Mine", 0)]
    with pytest.raises(
        ValueError,
        match="scenario 'tools' cannot use --endpoint embeddings: it runs with --endpoint chat|completions",
    ):
        for_endpoint([("tools", 1)], "embeddings")
    assert for_endpoint([("chat", 1), ("embeddings", 2)], "embeddings") == [("embeddings", 3)]
    assert for_endpoint([("chat", 3), ("embeddings", 1)], "chat") == [("chat", 3), ("embeddings", 1)]  # a mix
    with pytest.raises(ValueError, match="'multi-turn' cannot use --endpoint rerank"):
        for_endpoint([("multi-turn", 1)], "rerank")
    with pytest.raises(ValueError, match="'json' cannot use --endpoint responses"):
        for_endpoint([("json", 1)], "responses")
    assert {"embeddings", "rerank"} <= set(SCENARIOS)


def test_answered_items() -> None:
    assert answered_items("embeddings", {"data": [{}, {}]}) == 2
    assert answered_items("rerank", {"results": [{}]}) == 1
    assert answered_items("score", {"results": [{}]}) is None


def _pooled(i: int, e2el_us: int, prompt: int) -> RequestRecord:
    return RequestRecord(
        scenario="embeddings",
        worker="w",
        user=0,
        seq=i,
        endpoint="embeddings",
        t_start=100.0 + i * 0.1,
        chunk_times_us=[e2el_us],
        end_us=e2el_us,
        prompt_tokens=prompt,
        status=200,
        not_streamed=True,
    )


def test_a_pooling_run_has_e2el_and_input_throughput_and_no_output_figures() -> None:
    recs = [_pooled(i, 10_000 * (i + 1), 32) for i in range(10)]
    res = compute_metrics(recs, duration=2.0)
    assert res["completed"] == 10 and res["total_input_tokens"] == 320
    assert res["input_throughput"] == 160.0 and res["request_throughput"] == 5.0
    assert res["median_e2el_ms"] == pytest.approx(55.0) and res["pooling_requests"] == 10
    assert res["p99_e2el_ms"] == pytest.approx(
        99.5, abs=0.6
    )  # E2EL gets the percentiles (vLLM's pooling default)
    for k in ("total_output_tokens", "output_throughput", "max_output_tokens_per_s"):
        assert res[k] is None, k  # absent, never 0
    assert not any(k.endswith(("_ttft_ms", "_tpot_ms", "_itl_ms")) for k in res)
    text = format_summary(res)
    assert "Input token throughput (tok/s):         160.00" in text and "E2EL" in text
    assert "Total generated tokens" not in text and "Output token" not in text and "Mean TTFT" not in text
    assert (
        peak_output_tokens_per_s(recs) == 0.0
    )  # a pooling answer weighs nothing (its one "chunk" is its end)


def test_a_mixed_run_keeps_the_chat_figures() -> None:
    chat = RequestRecord(
        scenario="chat",
        worker="w",
        user=0,
        seq=99,
        endpoint="chat",
        t_start=100.0,
        chunk_times_us=[5_000, 6_000, 7_000],
        end_us=7_000,
        prompt_tokens=8,
        output_tokens=3,
        status=200,
    )
    res = compute_metrics([chat, _pooled(1, 20_000, 32)], duration=1.0)
    assert res["total_output_tokens"] == 3 and res["pooling_requests"] == 1
    assert res["median_ttft_ms"] == 5.0  # TTFT of the streamed request only
    assert res["max_output_tokens_per_s"] == 3.0
    assert res["chunk_token_ratio"] == 1.0  # the pooling answer's one "chunk" (its end) is not output


def test_the_report_shows_input_throughput_and_no_output_rows_for_a_pooling_run() -> None:
    from orchestration.report.model import Report
    from orchestration.report.postprocess import RunData

    res = compute_metrics([_pooled(i, 10_000, 32) for i in range(4)], duration=1.0)
    keys = [k for k, _, _ in Report([RunData("d", "d", res, "records")], [], None).summary_rows()]
    assert "input_throughput" in keys and "pooling_requests" in keys and "median_e2el_ms" in keys
    assert not {"output_throughput", "max_output_tokens_per_s", "mean_ttft_ms"} & set(keys)
