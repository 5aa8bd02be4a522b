"""Reasoning streams and non-streamed answers in the reader and the record."""

from __future__ import annotations

import json
from typing import Any

from vllm_users.client.sse_events import SseEvents, StreamResult
from vllm_users.client.stream import _read_whole
from vllm_users.measure.record import RequestRecord, record_from_stream

WHERE = dict(
    scenario="chat",
    worker="w0",
    user=0,
    seq=0,
    endpoint="chat",
    t_intended=None,
    input_len=8,
    output_len=8,
    turn=0,
    session=0,
)


def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    doc = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def usage(completion: int, reasoning: int | None = None) -> bytes:
    u: dict[str, Any] = {"prompt_tokens": 4, "completion_tokens": completion}
    if reasoning is not None:
        u["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return b"data: " + json.dumps({"id": "x", "choices": [], "usage": u}).encode() + b"\n\n"


def read(events: list[bytes], want_text: bool = False) -> StreamResult:
    """Each event arrives 10 ms after the one before it (the role chunk at 0.01 s)."""
    res = StreamResult(t0=0.0, status=200)
    ev = SseEvents(res, "chat", want_text)
    for i, e in enumerate([event({"role": "assistant", "content": ""}), *events, b"data: [DONE]\n\n"]):
        ev.feed(e, 0.01 * (i + 1))
    ev.finish(1.0)
    res.t_end = 1.0
    return res


def thinking(key: str, n: int, answer: int, fin: bytes) -> list[bytes]:
    out = [event({key: f"t{i}"}) for i in range(n)]
    out += [event({"content": f"a{i}"}) for i in range(answer - 1)]
    return [*out, event({"content": "end"}, "stop"), fin]


def test_reasoning_content_then_content() -> None:
    res = read(thinking("reasoning_content", 3, 2, usage(5)), want_text=True)
    assert len(res.chunk_times) == 5 and res.reasoning_chunks == 3
    assert res.t_answer == res.chunk_times[3]  # the first content chunk
    assert res.text == "a0end"  # the answer only: a scenario's check() sees no thinking
    rec = record_from_stream(res, **WHERE)
    assert rec.answer_us == round(res.chunk_times[3] * 1e6) and rec.chunk_times_us[0] < rec.answer_us
    assert (rec.reasoning_tokens, rec.reasoning_estimated, rec.output_tokens) == (3, True, 5)


def test_reasoning_name_and_usage_reasoning_tokens() -> None:
    res = read(thinking("reasoning", 4, 3, usage(9, reasoning=6)))
    assert res.reasoning_chunks == 4 and res.t_answer == res.chunk_times[4]
    rec = record_from_stream(res, **WHERE)
    assert (rec.reasoning_tokens, rec.reasoning_estimated) == (6, False)  # the server's count wins


def test_a_delta_with_reasoning_and_content_is_the_first_answer() -> None:
    res = read(
        [
            event({"reasoning_content": "t"}),
            event({"reasoning_content": "u", "content": "a"}),
            event({"content": "b"}, "stop"),
        ]
    )
    assert res.reasoning_chunks == 1 and res.t_answer == res.chunk_times[1]


def test_a_stream_without_reasoning_has_no_reasoning_fields() -> None:
    res = read(
        [event({"content": "a"}), event({"content": "b", "reasoning_content": None}, "stop"), usage(2, 0)]
    )
    assert res.reasoning_chunks == 0
    rec = record_from_stream(res, **WHERE)
    assert rec.answer_us is None and rec.reasoning_tokens is None and rec.reasoning_estimated is None
    line = json.loads(rec.to_json())
    assert [line[k] for k in ("answer_us", "reasoning_tokens", "reasoning_estimated", "not_streamed")] == [
        None
    ] * 4
    assert RequestRecord.from_dict(line) == rec


def test_reasoning_only_stream_has_reasoning_but_no_answer_time() -> None:
    res = read([event({"reasoning_content": "t"}), event({"reasoning_content": "u"}, "length"), usage(2)])
    rec = record_from_stream(res, **WHERE)
    assert rec.ok and rec.answer_us is None and rec.reasoning_tokens == 2


class _Body:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.raw = json.dumps(doc).encode()

    def read(self) -> bytes:
        return self.raw


def test_non_streamed_answer_is_marked_and_reasoning_comes_from_usage() -> None:
    doc = {
        "choices": [{"message": {"content": '{"a": 1}', "reasoning": "hmm"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 4,
            "completion_tokens": 9,
            "completion_tokens_details": {"reasoning_tokens": 5},
        },
    }
    res = StreamResult(t0=0.0, status=200)
    _read_whole(_Body(doc), res, "chat", True)
    assert res.streamed is False and res.text == '{"a": 1}' and res.error is None
    rec = record_from_stream(res, **WHERE)
    assert rec.not_streamed is True and rec.output_tokens == 9 and rec.answer_us is None
    assert (rec.reasoning_tokens, rec.reasoning_estimated) == (5, False)
    assert json.loads(rec.to_json())["not_streamed"] is True


def test_histograms_get_ttfa_and_non_streamed_e2el_only() -> None:
    from vllm_users.measure.histograms import HistogramSet

    hs = HistogramSet()
    base = dict(scenario="chat", worker="w", user=0, seq=0, endpoint="chat", t_start=0.0, output_tokens=3)
    hs.add_record(
        RequestRecord(**base, chunk_times_us=[10_000, 20_000, 30_000], answer_us=20_000, reasoning_tokens=1)
    )
    hs.add_record(RequestRecord(**{**base, "scenario": "ns"}, chunk_times_us=[50_000], not_streamed=True))
    got = hs.summary_ms((50,))
    assert abs(got["chat|ttfa"]["p50"] - 20.0) < 0.05 and abs(got["ns|e2el"]["p50"] - 50.0) < 0.05  # 3 digits
    assert "ns|ttft" not in got and "ns|itl" not in got
