"""Tool-call verdicts, generated tools, shared-prefix choice."""

from __future__ import annotations

import json
import random

from jsonschema import Draft202012Validator

from vllm_sim.schema_gen import generate
from vllm_users.scenarios.tools_user import judge_tool_calls, make_tools, tool_choice_field
from vllm_users.workload.prefixes import SharedPrefixes


def _call(tools: list, i: int = 0, args: object = None) -> dict:
    fn = tools[i]["function"]
    a = generate(fn["parameters"], random.Random(1)) if args is None else args
    return {"id": "c1", "name": fn["name"], "arguments": a if isinstance(a, str) else json.dumps(a)}


def test_make_tools_seeded_and_valid() -> None:
    tools = make_tools(0)
    assert tools == make_tools(0) and tools != make_tools(1)
    assert len({t["function"]["name"] for t in tools}) == len(tools)
    for t in tools:
        Draft202012Validator.check_schema(t["function"]["parameters"])


def test_judge_tool_calls() -> None:
    tools = make_tools(0)
    name = tools[1]["function"]["name"]
    assert judge_tool_calls({0: _call(tools)}, tools, "required").valid
    assert judge_tool_calls({0: _call(tools, 1)}, tools, name).valid
    v = judge_tool_calls({0: _call(tools, 0)}, tools, name)
    assert not v.valid and "although tool_choice named" in v.detail
    assert not judge_tool_calls(None, tools, "required").valid
    v = judge_tool_calls(None, tools, "auto")
    assert v.valid and v.calls == 0
    bad_name = dict(_call(tools), name="launch_rocket")
    assert "unknown tool" in judge_tool_calls({0: bad_name}, tools, "auto").detail
    assert "not JSON" in judge_tool_calls({0: _call(tools, 0, '{"a": ')}, tools, "auto").detail
    assert "schema mismatch" in judge_tool_calls({0: _call(tools, 0, {"zzz": 1})}, tools, "auto").detail


def test_tool_choice_field() -> None:
    assert tool_choice_field("auto") == "auto"
    assert tool_choice_field("get_weather") == {"type": "function", "function": {"name": "get_weather"}}


def test_shared_prefix_fraction_and_determinism() -> None:
    sp = SharedPrefixes(64, 0.3, 3, seed=0)
    shared = [sp.is_shared(k) for k in range(1000)]
    assert abs(sum(shared) / 1000 - 0.3) < 0.01  # low-discrepancy: close for any long run of keys
    texts = {sp.text(k) for k in range(200) if sp.is_shared(k)}
    assert len(texts) == 3
    assert sp.text(5) == SharedPrefixes(64, 0.3, 3, seed=0).text(5)
    unique = [sp.text(k) for k in range(50) if not sp.is_shared(k)]
    assert len(set(unique)) == len(unique)
    assert len(sp.text(0).split()) == 64  # type: ignore[union-attr]
    assert SharedPrefixes(0, 1.0, 1, 0).text(0) is None
    assert not any(SharedPrefixes(8, 0.0, 1, 0).is_shared(k) for k in range(100))
    assert all(SharedPrefixes(8, 1.0, 1, 0).is_shared(k) for k in range(100))
