"""The golden transcripts still match what the live vLLM sends (key structure, event count, usage).

Catches drift after a vLLM upgrade: re-record with `python -m tests.e2e.record_golden` when this fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.record_golden import exchange

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
STREAMS = ["chat_stream", "chat_stream_no_usage", "chat_stream_continuous_usage", "completions_stream"]


def _shape(obj):
    """Structure without values: dict keys (sorted) and the shapes of list items."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in sorted(obj.items()) if k not in ("id", "created")}
    if isinstance(obj, list):
        return [_shape(v) for v in obj]
    return type(obj).__name__


def _events(body: bytes) -> list:
    out = []
    for block in body.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block
        payload = block[len(b"data: ") :]
        out.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return out


def _text(events: list) -> str:
    out = []
    for e in events:
        if isinstance(e, dict):
            for c in e["choices"]:
                out.append(c.get("text") or (c.get("delta") or {}).get("content") or "")
    return "".join(out)


@pytest.mark.parametrize("name", STREAMS)
def test_stream_matches_golden(vllm_server, name):
    """Same shapes, text and usage as recorded. The event count may be lower than recorded: a busy
    vLLM coalesces several tokens into one chunk (see chat_stream_merged_c48.sse)."""
    meta = json.loads((GOLDEN / f"{name}.headers.json").read_text())
    req = meta["request"]
    body = dict(req["body"], model=vllm_server.model_name)
    live = exchange(vllm_server.host, vllm_server.port, req["method"], req["path"], body)
    assert live.status == 200
    assert live.header("content-type") == "text/event-stream; charset=utf-8"
    gold_ev = _events((GOLDEN / f"{name}.sse").read_bytes())
    live_ev = _events(live.body)
    assert live_ev[-1] == gold_ev[-1] == "[DONE]"
    assert 3 <= len(live_ev) <= len(gold_ev)
    gold_shapes = [_shape(e) for e in gold_ev]
    live_shapes = [_shape(e) for e in live_ev]
    assert live_shapes[0] == gold_shapes[0]  # role chunk (chat) / first text chunk (completions)
    assert live_shapes[-2:] == gold_shapes[-2:]  # last chunk (usage or finish_reason) + [DONE]
    assert all(sh in gold_shapes for sh in live_shapes)
    assert _text(live_ev) == _text(gold_ev)  # temperature 0 on the same deterministic model
    gold_usage = [e["usage"] for e in gold_ev if isinstance(e, dict) and e.get("usage")]
    live_usage = [e["usage"] for e in live_ev if isinstance(e, dict) and e.get("usage")]
    assert live_usage[-1:] == gold_usage[-1:]
