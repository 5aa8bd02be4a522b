"""The SSE reader: event framing, output classification, usage, errors — byte by byte."""

from __future__ import annotations

import json

import pytest

from vllm_users.client.chunks import is_chat_output, is_completion_output
from vllm_users.client.sse_events import SseEvents, StreamResult


def chunk(delta: dict, finish: str | None = None) -> bytes:
    doc = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def usage(p: int, c: int) -> bytes:
    return json.dumps(
        {"id": "x", "choices": [], "usage": {"prompt_tokens": p, "completion_tokens": c}}
    ).encode()


def feed_all(
    pieces: list[tuple[bytes, float]], completions: bool = False, want_text: bool = False
) -> StreamResult:
    res = StreamResult(t0=0.0)
    ev = SseEvents(res, "completions" if completions else "chat", want_text)
    for data, t in pieces:
        ev.feed(data, t)
    ev.finish(pieces[-1][1] if pieces else 0.0)
    return res


def test_role_chunk_is_not_output_but_content_is() -> None:
    assert not is_chat_output(chunk({"role": "assistant", "content": ""}))
    assert is_chat_output(chunk({"content": "a"}))
    assert is_chat_output(chunk({"content": ""}))  # empty non-role delta counts (vLLM bench's rule)
    assert not is_chat_output(chunk({"content": None}))
    assert is_chat_output(chunk({"reasoning_content": "think"}))
    assert is_chat_output(chunk({"reasoning": "think"}))
    assert is_chat_output(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}))
    assert not is_chat_output(usage(3, 4))
    assert is_chat_output(b'{"choices": [{"delta": {"content": "spaced"}}]}')


def test_escaped_key_inside_content_does_not_confuse_classification() -> None:
    tricky = chunk({"role": "assistant", "content": ""})
    assert not is_chat_output(tricky)
    inner = chunk({"content": 'say "content":"x"'})
    assert is_chat_output(inner)


def test_completions_any_choice_counts() -> None:
    assert is_completion_output(b'{"choices":[{"text":"","index":0}]}')
    assert not is_completion_output(b'{"choices":[],"usage":{"completion_tokens":1}}')


def test_events_per_segment_and_split_across_segments_with_crlf_and_comments() -> None:
    body = (
        b": keep-alive comment\r\n\r\n"
        + b"data: "
        + chunk({"role": "assistant", "content": ""})
        + b"\r\n\r\n"
        + b"data:"
        + chunk({"content": "a"})
        + b"\n\n"  # no space after data:
        + b"data: "
        + chunk({"content": "b"}, "length")
        + b"\n\n"
        + b"data: "
        + usage(5, 2)
        + b"\n\n"
        + b"data: [DONE]\n\n"
    )
    # split in awkward places: inside a line, between \r and \n
    cut1 = body.index(b'content":"a') + 3
    cut2 = body.index(b"[DONE]") - 1
    res = feed_all([(body[:cut1], 1.0), (body[cut1:cut2], 2.0), (body[cut2:], 3.0)])
    assert res.chunk_times == [2.0, 2.0]  # both output chunks completed in the second segment
    assert res.usage == {"prompt_tokens": 5, "completion_tokens": 2}
    assert res.finish_reason == "length"
    assert res.done and res.error is None


def test_inband_error_and_text_collection() -> None:
    err = b'data: {"error":{"message":"boom","type":"InternalServerError","code":500}}\n\n'
    res = feed_all([(b"data: " + chunk({"content": "x"}) + b"\n\n" + err + b"data: [DONE]\n\n", 1.0)])
    assert res.error == "inband_error" and res.error_detail == "boom"
    res = feed_all(
        [(b"data: " + chunk({"content": "he"}) + b"\n\ndata: " + chunk({"content": "llo"}) + b"\n\n", 1.0)],
        want_text=True,
    )
    assert res.text == "hello"


def test_tool_call_deltas_are_merged() -> None:
    first = chunk(
        {
            "tool_calls": [
                {"index": 0, "id": "call1", "type": "function", "function": {"name": "f", "arguments": ""}}
            ]
        }
    )
    rest = chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]})
    res = feed_all(
        [(b"data: " + first + b"\n\ndata: " + rest + b"\n\ndata: [DONE]\n\n", 1.0)], want_text=True
    )
    assert res.tool_calls == {0: {"id": "call1", "name": "f", "arguments": '{"a": 1}'}}
    assert len(res.chunk_times) == 2


@pytest.mark.parametrize("torn", [b'data: {"choi', b"data: [DO"])
def test_torn_last_line_is_truncation(torn: bytes) -> None:
    res = feed_all([(b"data: " + chunk({"content": "a"}) + b"\n\n" + torn, 1.0)])
    assert res.error == "truncated"


def _stream_with(eol: bytes) -> tuple[bytes, list[int]]:
    """A chat stream whose every line ends in `eol`, and where each output event's dispatch is decided: the
    position just after the first byte of the blank line's terminator (a CR ends a line on its own)."""
    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "a"}),
        chunk({"content": "b"}, "length"),
        usage(5, 2),
        b"[DONE]",
    ]
    body, ends = b": comment" + eol + eol, []
    for i, e in enumerate(events):
        body += b"data: " + e + eol
        if i in (1, 2):
            ends.append(len(body) + 1)
        body += eol
    return body, ends


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_every_line_ending_and_every_split_point(eol: bytes) -> None:
    """LF, CRLF and a lone CR frame the same events, wherever the reads split them (CR|LF across reads
    included), and each event is timed by the read that completed it."""
    body, ends = _stream_with(eol)
    for k in range(len(body) + 1):
        res = feed_all([(body[:k], 1.0), (body[k:], 2.0)], want_text=True)
        assert res.error is None and res.done, (k, res.error_detail)
        assert res.text == "ab" and res.usage == {"prompt_tokens": 5, "completion_tokens": 2}, k
        assert res.chunk_times == [1.0 if end <= k else 2.0 for end in ends], k
        assert res.finish_reason == "length"
    one_by_one = feed_all([(body[i : i + 1], float(i)) for i in range(len(body))])
    assert one_by_one.done and one_by_one.chunk_times == [float(e - 1) for e in ends]


def test_mixed_line_endings_and_cr_then_lf_as_separate_reads() -> None:
    a, b = b"data: " + chunk({"content": "a"}), b"data: " + chunk({"content": "b"})
    # a lone CR ends "a"'s line, CRLF is its blank line; LF-LF frames "b"; CR CR frames [DONE]
    res = feed_all(
        [(a + b"\r", 1.0), (b"\r", 2.0), (b"\n", 3.0), (b + b"\n\n", 4.0), (b"data: [DONE]\r\r", 5.0)]
    )
    assert res.error is None and res.done and res.chunk_times == [2.0, 4.0]
    # "\r" then "\n" in the next read is one line end, not a blank line: the event is not dispatched early
    res = feed_all([(a + b"\r", 1.0), (b"\n", 2.0), (b"\r\n", 3.0), (b"data: [DONE]\n\n", 4.0)])
    assert res.chunk_times == [3.0] and res.done
