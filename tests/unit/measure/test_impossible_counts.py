"""Counts that cannot both be true, settled and flagged: usage below the output chunks streamed (the chunks are
counted) and a stream whose chunks all came at once (no TPOT or ITL: the gaps time a buffering proxy)."""

from __future__ import annotations

from time import perf_counter

import pytest

from orchestration.report.summary import format_summary
from tests.unit.measure.test_record_constructors import WHERE
from vllm_users.client.stream import StreamResult
from vllm_users.measure import metric_keys as K
from vllm_users.measure.metrics import tpot_s
from vllm_users.measure.record import record_from_stream
from vllm_users.measure.result_fields import compute_metrics


def _stream(n: int, gap_s: float, usage: int | None, *, empty_finish: bool = False) -> StreamResult:
    t0 = perf_counter()
    return StreamResult(
        t0,
        chunk_times=[t0 + 0.1 + i * gap_s for i in range(n)],
        t_end=t0 + 0.1 + n * gap_s,
        status=200,
        done=True,
        finish_reason="length",
        usage=None if usage is None else {"prompt_tokens": 32, "completion_tokens": usage},
        finish_event=b'{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":"length"}]}'
        % (b"" if empty_finish else b"x"),
    )


def _records(n: int, gap_s: float, usage: int | None, k: int = 4) -> list:
    return [record_from_stream(_stream(n, gap_s, usage), **WHERE) for _ in range(k)]


# ----------------------------------------------------------------------------------------- usage below chunks
def test_usage_below_the_chunks_counts_the_chunks_and_says_so() -> None:
    rec = record_from_stream(_stream(16, 0.010, 8), **WHERE)
    assert rec.output_tokens == 16 and rec.tokens_estimated
    assert rec.extra == {"usage_tokens": 8}
    assert tpot_s(rec) == pytest.approx(0.010, abs=2e-6)  # 150 ms over 15 gaps: the real 10, not 21.4
    res = compute_metrics(_records(16, 0.010, 8))
    assert res[K.TOTAL_OUTPUT_TOKENS] == 64
    assert res[K.CHUNK_TOKEN_RATIO] == pytest.approx(1.0)
    assert res[K.TPOT.key("mean")] == pytest.approx(10.0, abs=0.01)
    u = res[K.USAGE_BELOW_CHUNKS]
    assert (u["requests"], u["usage_output_tokens"], u["chunk_output_tokens"], u["count_used"]) == (
        4,
        32,
        64,
        "chunks",
    )
    assert "Usage below chunks (chunks counted):" in format_summary(res)


@pytest.mark.parametrize(
    ("n", "usage", "empty_finish"),
    [
        pytest.param(8, 16, False, id="usage-above-chunks-merged-tokens"),
        pytest.param(16, 16, False, id="equal"),
        pytest.param(9, 8, True, id="an-empty-finish-chunk-proves-no-token"),
    ],
)
def test_a_usage_the_chunks_allow_is_trusted_and_not_flagged(n: int, usage: int, empty_finish: bool) -> None:
    rec = record_from_stream(_stream(n, 0.010, usage, empty_finish=empty_finish), **WHERE)
    assert rec.output_tokens == usage and not rec.tokens_estimated and rec.extra is None
    assert K.USAGE_BELOW_CHUNKS not in compute_metrics([rec])


# ----------------------------------------------------------------------------------------- delivered at once
def test_a_stream_delivered_at_once_has_no_tpot_or_itl() -> None:
    rec = record_from_stream(_stream(16, 0.0, 16), **WHERE)
    assert rec.extra == {"chunks_at_once": 16}
    assert len(rec.chunk_times_us) == 1 and rec.ttft_s == rec.e2el_s and rec.output_tokens == 16
    assert tpot_s(rec) is None
    res = compute_metrics(_records(16, 0.0, 16))
    assert not [k for k in res if "tpot" in k or "itl" in k]  # absent, never 0.00
    assert res[K.TTFT.key("mean")] == pytest.approx(res[K.E2EL.key("mean")])
    assert res[K.CHUNK_TOKEN_RATIO] == pytest.approx(1.0)  # the chunks that came, though at once
    assert res[K.DELIVERED_AT_ONCE]["requests"] == 4 and res[K.DELIVERED_AT_ONCE]["streamed_requests"] == 4
    assert "buffering proxy?" in res[K.DELIVERED_AT_ONCE]["why"]
    text = format_summary(res)
    assert "TPOT and ITL absent: delivered at once: a buffering proxy?" in text
    assert "Delivered at once (a buffering proxy?):" in text and "4 of 4" in text


def test_streams_at_once_beside_real_ones_leave_the_real_figures() -> None:
    recs = _records(16, 0.0, 16, k=2) + _records(16, 0.010, 16, k=2)
    res = compute_metrics(recs)
    assert res[K.TPOT.key("mean")] == pytest.approx(10.0, abs=0.01)  # the at-once ones give no 0 to average
    assert res[K.ITL.key("median")] == pytest.approx(10.0, abs=0.01)
    assert res[K.DELIVERED_AT_ONCE]["requests"] == 2


def test_close_chunks_of_a_fast_real_stream_are_not_at_once() -> None:
    rec = record_from_stream(_stream(2, 0.001, 2), **WHERE)  # 1 ms apart: a fast engine, measured
    assert (
        rec.extra is None and len(rec.chunk_times_us) == 2 and tpot_s(rec) == pytest.approx(0.001, abs=2e-6)
    )
    one = record_from_stream(_stream(1, 0.0, 1), **WHERE)  # one chunk: nothing to deliver "at once"
    assert one.extra is None


@pytest.mark.parametrize(
    ("finish", "empty"),
    [
        pytest.param(
            b'{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}', True, id="empty"
        ),
        pytest.param(
            b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}', False, id="text"
        ),
        pytest.param(
            b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]},"finish_reason":"tool_calls"}]}',
            False,
            id="tool-call",
        ),
    ],
)
def test_the_reader_tells_an_empty_finish_chunk(finish: bytes, empty: bool) -> None:
    from vllm_users.client.sse_events import SseEvents

    res = StreamResult(0.0)
    ev = SseEvents(res, "chat", False)
    first = b'{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}'
    ev.feed(b"data: " + first + b"\n\ndata: " + finish + b"\n\ndata: [DONE]\n\n", 1.0)
    assert len(res.chunk_times) == 2 and res.empty_finish is empty and res.finish_reason


def test_the_per_scenario_lines_say_n_a_for_a_tpot_that_is_absent() -> None:
    at_once = compute_metrics(_records(16, 0.0, 16))
    real = compute_metrics(_records(16, 0.010, 16))
    res = {**real, "per_scenario": {"buffered": at_once, "direct": real}}
    lines = [ln for ln in format_summary(res).splitlines() if "TTFT p50" in ln]
    assert len(lines) == 2 and "TPOT p50     n/a" in lines[0] and "TPOT p50   10.00 ms" in lines[1], lines


def test_both_flags_reach_the_html_report(tmp_path) -> None:
    from orchestration.report.model import build_report
    from orchestration.report.postprocess import load_run
    from orchestration.report.render import render_html
    from tests.unit.report.helpers import write_run

    recs = _records(16, 0.0, 16, k=3) + _records(16, 0.010, 8, k=2)
    html = render_html(build_report([load_run(write_run(str(tmp_path / "a"), recs))]), [])
    assert "Delivered at once (a buffering proxy?): 3 of 5 streamed" in html
    assert "Usage below chunks (chunks counted): 2 requests (usage 16 tokens, chunks 32)" in html
