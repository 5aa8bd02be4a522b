"""The golden transcripts still describe what the live vLLM sends: what vLLM guarantees, not what it wrote.

Catches drift after a vLLM upgrade: re-record with `python -m tests.e2e.record_golden` when this fails.
The generated text is not compared: a random-weight model's text at temperature 0 depends on floating
point, which differs between CPU kernels (AVX2 and AVX-512 builds of vLLM part after ~70 characters).
What is compared: the order of the event kinds (role, content, finish, usage, [DONE]), every event's
field names in order, one id and object per stream, finish reason and usage (prompt tokens exact; output
tokens = max_tokens when the reason is "length"), and how many chunks carry the output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.record_golden import exchange
from tests.e2e.speed import scaled

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
STREAMS = ["chat_stream", "chat_stream_no_usage", "chat_stream_continuous_usage", "completions_stream"]


def shape(obj: Any) -> Any:
    """Structure without values, keys in the order sent: dicts as (key, shape) pairs, lists item by item."""
    if isinstance(obj, dict):
        return tuple((k, shape(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return tuple(shape(v) for v in obj)
    return type(obj).__name__


def events(body: bytes) -> list[Any]:
    """The stream's events: parsed JSON objects, and the string "[DONE]"."""
    out: list[Any] = []
    for block in body.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block
        payload = block[len(b"data: ") :]
        out.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return out


def kind(event: Any) -> str:
    """done, usage (no choices), role (chat's first chunk), finish (carries finish_reason) or content."""
    if event == "[DONE]":
        return "done"
    if not event["choices"]:
        return "usage"
    choice = event["choices"][0]
    if choice.get("finish_reason") is not None:
        return "finish"
    return "role" if (choice.get("delta") or {}).get("role") else "content"


def kind_pattern(evs: list[Any]) -> str:
    """The kinds in order, runs of content collapsed: e.g. 'role content+ finish usage done'."""
    return re.sub(r"(content )+", "content+ ", " ".join(kind(e) for e in evs) + " ").strip()


def _usage(evs: list[Any]) -> list[dict[str, Any]]:
    return [e["usage"] for e in evs if isinstance(e, dict) and e.get("usage")]


def without_details(event: Any) -> Any:
    """The event with usage's prompt_tokens_details left out: the tier's server runs with
    --enable-prompt-tokens-details (one server for every e2e test), the transcripts were recorded without."""
    if isinstance(event, dict) and isinstance(event.get("usage"), dict):
        usage = {k: v for k, v in event["usage"].items() if k != "prompt_tokens_details"}
        return {**event, "usage": usage}
    return event


@pytest.mark.parametrize("name", STREAMS)
def test_stream_keeps_golden_contract(vllm_server, name):
    meta = json.loads((GOLDEN / f"{name}.headers.json").read_text())
    req = meta["request"]
    body = dict(req["body"], model=vllm_server.model_name)
    live = exchange(vllm_server.host, vllm_server.port, req["method"], req["path"], body, timeout=scaled(120))
    assert live.status == 200
    assert live.header("content-type") == "text/event-stream; charset=utf-8"
    gold, got = events((GOLDEN / f"{name}.sse").read_bytes()), [without_details(e) for e in events(live.body)]

    # kinds in the same order; each kind's events have the golden's field names, in the golden's order
    assert kind_pattern(got) == kind_pattern(gold)
    gold_shapes: dict[str, set[Any]] = {}
    for e in gold:
        gold_shapes.setdefault(kind(e), set()).add(shape(e))
    for e in got:
        assert shape(e) in gold_shapes[kind(e)], (kind(e), e)
    objs = [e for e in got if isinstance(e, dict)]
    assert len({e["id"] for e in objs}) == 1
    assert {e["object"] for e in objs} == {e["object"] for e in gold if isinstance(e, dict)}
    assert {e["model"] for e in objs} == {vllm_server.model_name}

    # finish reason and usage
    max_tokens = body["max_tokens"]
    finish = [c["finish_reason"] for e in objs for c in e["choices"] if c.get("finish_reason") is not None]
    assert len(finish) == 1 and finish[0] in ("length", "stop")
    gold_usage, live_usage = _usage(gold), _usage(got)
    assert bool(live_usage) == bool(gold_usage) == ("stream_options" in body)
    if not live_usage:
        return
    last = live_usage[-1]
    assert list(last) == list(gold_usage[-1])  # same fields, same order
    assert last["prompt_tokens"] == gold_usage[-1]["prompt_tokens"]  # same tokenizer and chat template
    assert last["total_tokens"] == last["prompt_tokens"] + last["completion_tokens"]
    assert 1 <= last["completion_tokens"] <= max_tokens
    assert (last["completion_tokens"] == max_tokens) == (finish[0] == "length")
    # chunks: at most one per token (a busy vLLM coalesces several tokens into one, see chat_stream_merged_c48.sse)
    carrying = [e for e in objs if kind(e) in ("content", "finish")]
    assert 1 <= len(carrying) <= last["completion_tokens"]
    if body.get("stream_options", {}).get("continuous_usage_stats"):
        assert len(live_usage) == len(objs)  # every chunk carries usage
        assert {u["prompt_tokens"] for u in live_usage} == {last["prompt_tokens"]}
        counts = [u["completion_tokens"] for u in live_usage]
        assert counts == sorted(counts) and counts[0] == 0
