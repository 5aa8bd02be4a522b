"""The engine's share of a burst's TTFT: vLLM's queue + prefill histograms (the engine core's own stamps) where
it exports them, not its TTFT histogram, which runs from the API server's arrival to that process's handling of
the first token and so holds a busy API server's time."""

from __future__ import annotations

from orchestration.twin.apiphase import engine_gaps
from orchestration.twin.probe import Shot
from vllm_users.measure.server_counters import parse_metrics


def _hist(name: str, total: float, count: int) -> str:
    # every observation in the +Inf bucket: the means come from sum and count
    return (
        f'{name}_bucket{{le="+Inf"}} {count}\n{name}_sum {total}\n{name}_count {count}\n'
        if count
        else f'{name}_bucket{{le="+Inf"}} 0\n{name}_sum 0\n{name}_count 0\n'
    )


def _metrics(n: int, ttft_s: float, queue_s: float | None, prefill_s: float | None) -> dict[str, float]:
    text = _hist("vllm:time_to_first_token_seconds", n * ttft_s, n)
    if queue_s is not None:
        text += _hist("vllm:request_queue_time_seconds", n * queue_s, n)
    if prefill_s is not None:
        text += _hist("vllm:request_prefill_time_seconds", n * prefill_s, n)
    return parse_metrics(text)


def _shots(n: int, ttft_s: float) -> list[Shot]:
    return [
        Shot(prompt_tokens=38, max_tokens=1, output_tokens=1, ttft_s=ttft_s, e2e_s=ttft_s) for _ in range(n)
    ]


def test_queue_and_prefill_are_the_engines_share_where_exported() -> None:
    """One API server on an H100: clients 66 ms, vLLM's TTFT histogram 36 ms, queue + prefill 4 ms: the gap is
    62 ms, not 30."""
    before = _metrics(0, 0.0, 0.0, 0.0)
    after = _metrics(64, 0.036, 0.001, 0.003)
    got = engine_gaps(before, after, _shots(64, 0.066))
    assert got["engine_ttft_from"] == "queue+prefill"
    assert abs(got["engine_ttft_ms"] - 4.0) < 1e-6 and abs(got["ttft_gap_ms"] - 62.0) < 1e-6, got


def test_the_ttft_histogram_where_there_is_no_prefill_histogram() -> None:
    """The simulator and older servers export no prefill histogram: the TTFT histogram is the engine's share."""
    before = _metrics(0, 0.0, 0.0, None)
    after = _metrics(64, 0.036, 0.001, None)
    got = engine_gaps(before, after, _shots(64, 0.066))
    assert "engine_ttft_from" not in got
    assert abs(got["engine_ttft_ms"] - 36.0) < 1e-6 and abs(got["ttft_gap_ms"] - 30.0) < 1e-6, got
