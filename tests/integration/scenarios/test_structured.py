"""json and tools scenarios against the simulator: every answer validated, per-scenario results."""

from __future__ import annotations

import json

from vllm_users.scenarios.tools_user import judge_tool_calls, make_tools
from vllm_users.workload.schemas import judge_json, schema_pool

from .runner import succeeded, vllm_locust

SMALL = ["--input-len", "32", "--output-len", "16"]


def test_json_validity_100_percent_and_mixed_run_per_scenario(tmp_path) -> None:
    r = vllm_locust(
        tmp_path,
        "--scenario",
        "chat:1,json:1",
        "--num-prompts",
        "40",
        "--users",
        "4",
        *SMALL,
        "--schema-complexity",
        "mixed",
    )
    assert succeeded(r), r.err
    res = r.result
    ps = res["per_scenario"]
    assert set(ps) == {"chat", "json"}
    assert ps["chat"]["completed"] + ps["json"]["completed"] == 40 == res["completed"]
    assert ps["json"]["completed"] > 5 and ps["chat"]["completed"] > 5
    assert ps["json"]["validity_rate"] == 1.0 and ps["chat"]["validity_rate"] is None
    assert res["validity_rate"] == 1.0 and res["failed"] == 0
    recs = [x for x in r.records() if x["scenario"] == "json"]
    assert all(x["valid"] is True for x in recs)
    # the schema index used is recorded and every answer needed more than --output-len 16 tokens
    assert {x["extra"]["schema_index"] for x in recs} and all(x["output_len"] > 16 for x in recs)


def test_json_structured_outputs_mode_nested(tmp_path) -> None:
    r = vllm_locust(
        tmp_path,
        *"--scenario json --json-mode structured_outputs --schema-complexity nested --num-prompts 16 --users 4 --input-len 32".split(),
    )
    assert succeeded(r), r.err
    assert r.result["validity_rate"] == 1.0 and r.result["completed"] == 16


def test_json_verdict_matches_an_independent_check_when_answers_are_cut(tmp_path) -> None:
    """An unbounded schema file (array without maxItems): answers get cut, each verdict is invalid_json."""
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "minItems": 80, "items": {"type": "string", "maxLength": 20}}
        },
        "required": ["items"],
    }
    path = tmp_path / "big.json"
    path.write_text(json.dumps(schema))
    r = vllm_locust(
        tmp_path,
        "--scenario",
        "json",
        "--json-schema",
        str(path),
        "--num-prompts",
        "6",
        "--users",
        "2",
        "--output-len",
        "40",
        "--input-len",
        "16",
    )
    assert r.rc == 1, r.err  # failures
    res = r.result
    assert res["validity_rate"] == 0.0 and res["errors_by_kind"] == {"invalid_json": 6}
    for x in r.records():
        assert x["valid"] is False and "truncated at max_tokens" in x["error_detail"]
    assert not judge_json('{"items": ["a"]}', schema).valid  # minItems: the checker itself can fail
    assert judge_json(json.dumps({"items": ["a"] * 80}), schema).valid


def test_tools_required_with_followup(tmp_path) -> None:
    r = vllm_locust(
        tmp_path,
        *"--scenario tools --tool-choice required --tool-followup --num-prompts 20 --users 4".split(),
        *SMALL,
    )
    assert succeeded(r), r.err
    res = r.result
    assert res["per_scenario"]["tools"]["completed"] == 20
    assert res["per_scenario"]["tools"]["validity_rate"] == 1.0
    assert res["per_scenario"]["tools-followup"]["completed"] == 20
    tools = make_tools(0)
    first = [x for x in r.records() if x["scenario"] == "tools"]
    assert all(x["extra"]["tool_calls"] >= 1 and x["finish_reason"] == "tool_calls" for x in first)
    # the follow-up is turn 1 of the tool request's session (one ticket: --num-prompts counts sessions)
    follow = {x["session"]: x for x in r.records() if x["scenario"] == "tools-followup"}
    assert sorted(follow) == sorted(x["session"] for x in first) == list(range(20))
    assert all(x["turn"] == 0 for x in first) and all(
        x["turn"] == 1 and x["t_intended"] is None for x in follow.values()
    )
    by_session = {x["session"]: x for x in first}
    assert all(
        follow[s]["t_start"] > by_session[s]["t_start"] and follow[s]["user"] == by_session[s]["user"]
        for s in follow
    )
    assert res["ttft_by_turn"]["1"]["count"] == 20
    assert judge_tool_calls(None, tools, "required").valid is False


def test_tools_auto_counts_text_answers(tmp_path) -> None:
    r = vllm_locust(
        tmp_path, *"--scenario tools --tool-choice auto --num-prompts 30 --users 4".split(), *SMALL
    )
    assert succeeded(r), r.err
    recs = r.records()
    no_call = sum(x["extra"]["no_call"] for x in recs)
    assert 0 < no_call < 30  # the simulator answers `auto` with text about half the time
    assert all(x["valid"] for x in recs)


def test_server_rejecting_tools_is_a_failure_with_its_message(tmp_path) -> None:
    r = vllm_locust(
        tmp_path, *"--scenario tools --tool-choice launch_rocket --num-prompts 4 --users 2".split()
    )
    assert r.rc == 1
    res = r.result
    assert res["errors_by_kind"] == {"http": 4} and res["http_errors_by_status"] == {"400": 4}
    assert all("Tool 'launch_rocket' has not been passed" in x["error_detail"] for x in r.records())


def test_generated_schemas_used_by_the_run_are_the_seeded_pool() -> None:
    assert schema_pool(0, "mixed") == schema_pool(0, "mixed")
