"""The simulator's --reasoning-tokens mode: thinking first (counted in max_tokens), then the answer."""

from __future__ import annotations

import json
import random

import pytest

from vllm_sim import wire
from vllm_sim.config import parse_config
from vllm_sim.request import build_plan, parse_request


def _req(body: dict, chat: bool = True):
    base = {"model": "m", "max_tokens": 10, "ignore_eos": True}
    base.update({"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"})
    return parse_request(json.dumps({**base, **body}).encode(), chat, "m", 8192)


def test_streamed_events_think_then_answer_and_usage_says_how_many() -> None:
    req = _req({"stream": True, "stream_options": {"include_usage": True}})
    plan = build_plan(req, random.Random(0), 0.0, 4)
    assert plan.n_tokens == 10 and plan.reasoning == 4
    w = wire.ChunkWriter(req, plan)
    deltas = [json.loads(w.pieces(i, i + 1, i + 1, i == 9)[6:])["choices"][0]["delta"] for i in range(10)]
    assert all(set(d) == {"reasoning_content"} for d in deltas[:4]) and all(
        set(d) == {"content"} for d in deltas[4:]
    )
    both = json.loads(w.pieces(3, 5, 5, False)[6:])["choices"][0]["delta"]  # an event across the end has both
    assert set(both) == {"reasoning_content", "content"}
    assert json.loads(w.usage(10)[6:])["usage"]["completion_tokens_details"] == {"reasoning_tokens": 4}


def test_reasoning_field_name_non_streamed_body_and_max_tokens() -> None:
    req = _req({})
    plan = build_plan(req, random.Random(0), 0.0, 3, "reasoning")
    msg = json.loads(wire.full_response(req, plan, plan.n_tokens, None))
    assert msg["choices"][0]["message"]["reasoning"] and msg["usage"]["completion_tokens_details"] == {
        "reasoning_tokens": 3
    }
    assert len(msg["choices"][0]["message"]["content"].split()) == 7
    all_thought = build_plan(_req({"max_tokens": 2}), random.Random(0), 0.0, 5)
    assert (all_thought.n_tokens, all_thought.reasoning, all_thought.finish_reason) == (2, 2, "length")
    assert (
        build_plan(_req({}, chat=False), random.Random(0), 0.0, 5).reasoning == 0
    )  # completions: no thinking
    assert build_plan(req, random.Random(0), 0.0).reasoning == 0


def test_flags() -> None:
    assert parse_config(["--reasoning-tokens", "8"]).reasoning_tokens == 8
    with pytest.raises(SystemExit):
        parse_config(["--reasoning-field", "thoughts"])
    with pytest.raises(SystemExit):
        parse_config(["--reasoning-tokens", "-1"])
