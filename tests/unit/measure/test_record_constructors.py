"""The record's constructors: a read response, an interrupted request and a dropped arrival become records."""

from __future__ import annotations

from time import perf_counter

import pytest

from vllm_users.client.stream import StreamResult
from vllm_users.measure.record import dropped_record, epoch, interrupted_record, record_from_stream

WHERE = dict(
    scenario="chat",
    worker="w0",
    user=7,
    seq=3,
    endpoint="chat",
    t_intended=None,
    input_len=32,
    output_len=16,
    turn=1,
    session=5,
)


def test_a_streamed_response_with_usage() -> None:
    t0 = perf_counter()
    res = StreamResult(
        t0,
        chunk_times=[t0 + 0.05, t0 + 0.06],
        t_end=t0 + 0.07,
        status=200,
        finish_reason="length",
        usage={"prompt_tokens": 30, "completion_tokens": 16, "prompt_tokens_details": {"cached_tokens": 8}},
    )
    rec = record_from_stream(res, **WHERE)
    assert rec.chunk_times_us == [50_000, 60_000] and rec.end_us == 70_000
    assert rec.t_start == pytest.approx(epoch(t0)) and rec.ok
    assert (rec.prompt_tokens, rec.output_tokens, rec.cached_tokens, rec.tokens_estimated) == (
        30,
        16,
        8,
        False,
    )
    assert (rec.turn, rec.session, rec.input_len, rec.output_len, rec.seq) == (1, 5, 32, 16, 3)


def test_without_usage_the_chunks_are_counted_and_errors_kept() -> None:
    t0 = perf_counter()
    res = StreamResult(
        t0,
        chunk_times=[t0 + 0.01] * 3,
        t_end=t0 + 0.02,
        status=200,
        error="truncated",
        error_detail="no [DONE]",
    )
    rec = record_from_stream(res, **WHERE)
    assert (rec.output_tokens, rec.tokens_estimated, rec.cached_tokens) == (3, True, None)
    assert (rec.error, rec.error_detail, rec.ok) == ("truncated", "no [DONE]", False)
    assert (
        record_from_stream(StreamResult(t0, t_end=t0, status=500, error="http"), **WHERE).output_tokens
        is None
    )


def test_interrupted_and_dropped() -> None:
    rec = interrupted_record(**WHERE)
    assert rec.error == "interrupted" and rec.chunk_times_us == [] and rec.session == 5
    drop = dropped_record("w1", 9, 1.7e9)
    assert (drop.error, drop.t_start, drop.t_intended, drop.user, drop.seq) == (
        "dropped",
        1.7e9,
        1.7e9,
        -1,
        9,
    )
