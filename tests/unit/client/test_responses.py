"""The Responses API and the pooling answers in the reader: which events are output,
usage in chat's names, the end without [DONE], error events; the records they make."""

from __future__ import annotations

import json
from typing import Any

from vllm_sim.request import Plan, SimRequest
from vllm_sim.responses import ResponsesWriter, full_response
from vllm_users.client import responses as R
from vllm_users.client.sse_events import SseEvents, StreamResult
from vllm_users.client.stream import _read_whole
from vllm_users.measure.record import record_from_stream

WHERE = dict(
    scenario="chat", worker="w0", user=0, seq=0, t_intended=None, input_len=8, output_len=8, turn=0, session=0
)


def sim_events(n: int, reasoning: int = 0, finish: str = "length") -> list[bytes]:
    """The simulator's Responses events of an answer of `n` tokens (the first `reasoning` of them thinking)."""
    req = SimRequest(
        chat=True, stream=True, model="m", prompt_ids=[1] * 5, max_tokens=n, request_id="chatcmpl-ab"
    )
    w = ResponsesWriter(req, Plan([f" w{i}" for i in range(n)], finish, reasoning=reasoning))
    return [
        w.role().encode(),
        *(w.pieces(i, i + 1, i + 1, i == n - 1).encode() for i in range(n)),
        w.usage(n).encode(),
    ]


def read(events: list[bytes], want_text: bool = False) -> StreamResult:
    """Event i arrives at 0.01·(i + 1) s."""
    res = StreamResult(t0=0.0, status=200)
    ev = SseEvents(res, "responses", want_text)
    for i, e in enumerate(events):
        ev.feed(e, 0.01 * (i + 1))
    ev.finish(1.0)
    res.t_end = 1.0
    return res


def test_output_text_deltas_are_the_chunks_and_usage_comes_from_completed() -> None:
    res = read(sim_events(4), want_text=True)
    assert res.chunk_times == [
        0.02,
        0.03,
        0.04,
        0.05,
    ]  # the opening events (created, item added) are not output
    assert res.done and res.error is None and res.finish_reason == "length"  # incomplete at max_output_tokens
    assert res.usage == {
        "prompt_tokens": 5,
        "completion_tokens": 4,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert res.text == " w0 w1 w2 w3"
    rec = record_from_stream(res, endpoint="responses", **WHERE)  # type: ignore[arg-type]
    assert (rec.output_tokens, rec.prompt_tokens, rec.tokens_estimated) == (4, 5, False)
    assert rec.chunk_times_us[0] == 20_000 and rec.not_streamed is None and rec.reasoning_tokens is None


def test_reasoning_deltas_count_as_reasoning_and_ttfa_is_the_first_answer_delta() -> None:
    res = read(sim_events(5, reasoning=2, finish="stop"))
    assert res.reasoning_chunks == 2 and res.t_answer == 0.04 and res.finish_reason == "stop"
    rec = record_from_stream(res, endpoint="responses", **WHERE)  # type: ignore[arg-type]
    assert (rec.reasoning_tokens, rec.reasoning_estimated, rec.answer_us) == (2, False, 40_000)


def test_a_stream_cut_before_completed_is_truncated_and_error_events_are_inband_errors() -> None:
    ev = sim_events(3)[:-1]
    res = StreamResult(t0=0.0, status=200)
    e = SseEvents(res, "responses", False)
    for x in ev:
        e.feed(x, 0.1)
    e.finish(0.2)
    assert not res.done and res.finish_reason is None  # send_and_read turns this into "truncated"
    failed = b'event: response.failed\ndata: {"type":"response.failed","response":{"error":{"message":"boom"}}}\n\n'
    res = read([sim_events(2)[0], failed])
    assert (res.error, res.error_detail) == ("inband_error", "boom")
    res = read([b'data: {"error":{"message":"engine died","code":500}}\n\n'])
    assert (res.error, res.error_detail) == ("inband_error", "engine died")


def test_classify_by_type() -> None:
    assert R.classify(b'{"type":"response.output_text.delta","delta":"x"}') == R.ANSWER
    assert R.classify(b'{"type":"response.reasoning_summary_text.delta","delta":"x"}') == R.REASONING
    assert R.classify(b'{"type":"response.output_text.done","text":"x"}') == R.NONE
    assert R.classify(b'{"type":"response.completed","response":{"error":null}}') == R.TERMINAL
    assert R.classify(b'{"type":"response.created","response":{"error":null}}') == R.NONE


class _Body:
    def __init__(self, doc: Any) -> None:
        self.raw = json.dumps(doc).encode()

    def read(self) -> bytes:
        return self.raw


def test_non_streamed_response_and_pooling_answers() -> None:
    req = SimRequest(
        chat=True, stream=False, model="m", prompt_ids=[1] * 7, max_tokens=3, request_id="chatcmpl-ab"
    )
    doc = json.loads(full_response(req, Plan([" a", " b", " c"], "length", reasoning=1), 3, None))
    res = StreamResult(t0=0.0, status=200)
    _read_whole(_Body(doc), res, "responses", True)
    assert res.error is None and res.text == " b c" and res.usage is not None
    rec = record_from_stream(res, endpoint="responses", **WHERE)  # type: ignore[arg-type]
    assert (rec.prompt_tokens, rec.output_tokens, rec.reasoning_tokens, rec.not_streamed) == (7, 3, 1, True)
    for api, body in (
        (
            "embeddings",
            {"data": [{"embedding": [0.1]}] * 2, "usage": {"prompt_tokens": 9, "completion_tokens": 0}},
        ),
        ("rerank", {"results": [{"index": 0, "relevance_score": 0.5}], "usage": {"total_tokens": 11}}),
        ("score", {"data": [{"score": 0.5}], "usage": {"prompt_tokens": 13, "total_tokens": 13}}),
    ):
        res = StreamResult(t0=0.0, status=200)
        _read_whole(_Body(body), res, api, False)
        rec = record_from_stream(res, endpoint=api, **WHERE)  # type: ignore[arg-type]
        assert rec.error is None and rec.not_streamed and len(rec.chunk_times_us) == 1
        assert rec.output_tokens is None and not rec.tokens_estimated  # absent, never 0 or a chunk count
        assert rec.prompt_tokens == {"embeddings": 9, "rerank": 11, "score": 13}[api]
    res = StreamResult(t0=0.0, status=200)
    _read_whole(_Body({"object": "list"}), res, "rerank", False)
    assert (res.error, res.error_detail) == ("bad_response", "rerank answer has no results list")


def test_the_pooling_endpoints_are_the_records() -> None:
    from vllm_users.measure.record import POOLING_ENDPOINTS

    assert R.POOLING == POOLING_ENDPOINTS  # client/ cannot import measure/: two spellings, one list
    assert [R.path_of(a) for a in R.APIS] == [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/embeddings",
        "/v1/rerank",
        "/v1/score",
    ]
