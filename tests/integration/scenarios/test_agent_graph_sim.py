"""A graph trace with a subagent replayed against the embedded simulator: each call starts after its parents
ended (the wait included), the subagent's prompt and the parent's next one share the parent's history in the
server's prefix cache, and every call is sent and counted once."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.integration.scenarios.runner import succeeded, vllm_locust
from vllm_users.exit_codes import USAGE
from vllm_users.options import build
from vllm_users.workload.session_graph import graph_of
from vllm_users.workload.synthetic_agents import agent_session

SIM_BLOCK = 16  # the simulator's KV block (vllm_sim/config.py): a cache hit counts whole blocks
WAIT_S = 0.3
NODES = [
    {"session_id": "s1", "node": "plan", "input_tokens": 120, "output_tokens": 6, "timestamp": 0},
    {"session_id": "s1", "node": "tool", "parents": ["plan"], "kind": "wait", "wait_ms": WAIT_S * 1000},
    {"session_id": "s1", "node": "sub1", "parents": ["plan"], "subagent": "explore", "new_tokens": 30,
     "output_tokens": 8},
    {"session_id": "s1", "node": "sub2", "parents": ["sub1"], "subagent": "explore", "new_tokens": 20,
     "output_tokens": 8},
    {"session_id": "s1", "node": "edit", "parents": ["tool", "sub2"], "input_tokens": 200, "output_tokens": 6},
    {"session_id": "s2", "node": "only", "new_tokens": 60, "output_tokens": 4, "timestamp": 0.2},
]  # fmt: skip


@pytest.fixture(scope="module")
def graph_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("agents")
    trace = tmp / "graph.jsonl"
    trace.write_text("".join(json.dumps(n) + "\n" for n in NODES))
    return vllm_locust(
        tmp, "--trace", str(trace), "--sim-args=--enable-prompt-tokens-details", "--ignore-eos", name="graph"
    )


def _by_node(run: Any) -> dict[str, dict[str, Any]]:
    return {r["extra"]["node"]: r for r in run.records()}


@pytest.mark.timeout(300)
def test_every_call_is_sent_once_after_its_parents(graph_run: Any) -> None:
    assert succeeded(graph_run), graph_run.logs()[-3000:]
    rep = graph_run.result["replay"]
    assert (rep["trace_requests"], rep["sent"], rep["not_sent"]) == (5, 5, 0)  # the wait is not a request
    r = _by_node(graph_run)
    assert sorted(r) == ["edit", "only", "plan", "sub1", "sub2"]

    def end(k: str) -> float:
        return float(r[k]["t_start"] + r[k]["end_us"] / 1e6)

    assert r["sub1"]["t_start"] >= end("plan") and r["sub2"]["t_start"] >= end("sub1")
    assert r["edit"]["t_start"] >= max(end("sub2"), end("plan") + WAIT_S)  # the join and the tool wait
    s1 = [r[k] for k in ("plan", "sub1", "sub2", "edit")]
    assert {x["session"] for x in s1} != {r["only"]["session"]} and len({x["session"] for x in s1}) == 1
    assert [x["turn"] for x in s1] == [0, 1, 2, 3]
    assert (r["sub1"]["extra"]["agent"], r["sub1"]["extra"]["depth"], r["edit"]["extra"]["agent"]) == (
        "explore",
        1,
        None,
    )
    # the new text of each call as the trace sized it: edit's recorded prompt less plan's history and sub2's answer
    assert [r[k]["input_len"] for k in ("plan", "sub1", "sub2", "edit")] == [120, 30, 20, 200 - (120 + 6) - 8]
    assert all(x["output_tokens"] == x["output_len"] for x in r.values())


@pytest.mark.timeout(300)
def test_the_child_s_prompt_starts_with_the_parent_s_history(graph_run: Any) -> None:
    assert succeeded(graph_run), graph_run.logs()[-3000:]
    r = _by_node(graph_run)
    assert r["plan"]["cached_tokens"] == 0 and r["only"]["cached_tokens"] == 0  # nothing before them shares
    for child, parent in (("sub1", "plan"), ("sub2", "sub1"), ("edit", "plan")):
        # the parent's whole prompt (less the template's closing tokens, at most one block) is the child's prefix
        shared = (r[parent]["prompt_tokens"] // SIM_BLOCK - 1) * SIM_BLOCK
        assert r[child]["cached_tokens"] >= shared > 0, (child, r[child], r[parent])
    # the subagent's own history grows: sub2 reuses sub1's prompt, longer than plan's alone
    assert r["sub2"]["cached_tokens"] > r["sub1"]["cached_tokens"]


@pytest.mark.timeout(300)
def test_the_sessions_completed(graph_run: Any) -> None:
    assert succeeded(graph_run), graph_run.logs()[-3000:]
    s = graph_run.result["sessions"]
    assert (s["sessions"], s["completed"], s["cut"], s["failed"], s["not_started"]) == (2, 2, 0, 0, 0)
    assert s["calls_per_session"]["max"] == 4 and s["duration_s"]["max"] >= WAIT_S
    assert "Sessions completed / cut / failed:" in graph_run.out


@pytest.mark.timeout(300)
def test_a_session_open_when_the_run_ends_is_cut_and_its_calls_count(tmp_path: Any) -> None:
    trace = tmp_path / "long.jsonl"
    nodes = [
        {"session_id": "s", "node": "a", "new_tokens": 20, "output_tokens": 4},
        {"session_id": "s", "node": "tool", "parents": ["a"], "kind": "wait", "wait_ms": 120_000},
        {"session_id": "s", "node": "b", "parents": ["tool"], "new_tokens": 20, "output_tokens": 4},
    ]
    trace.write_text("".join(json.dumps(n) + "\n" for n in nodes))
    run = vllm_locust(tmp_path, "--trace", str(trace), "--run-time", "3s", "--ignore-eos", name="cut")
    assert os.path.exists(os.path.join(run.run_dir, "result.json")), run.logs()[-3000:]
    res = run.result
    s = res["sessions"]
    assert (s["completed"], s["cut"], s["failed"]) == (0, 1, 0)
    assert res["completed"] == 1 and res["failed"] == 0  # its finished call counts; the cut is no failure


AGENT = {
    "agent_turns": 4,
    "agent_first_tokens": 200,
    "agent_new_tokens": 60,
    "agent_output_tokens": 8,
    "agent_tool_ms": 50,
    "agent_subagent_rate": 0.6,
    "agent_subagent_turns": 2,
    "agent_max_context": 4000,
}


@pytest.mark.timeout(300)
def test_synthetic_agents_run_their_seeded_graphs(tmp_path: Any) -> None:
    flags = [x for k, v in AGENT.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    run = vllm_locust(
        tmp_path,
        "--scenario",
        "agent",
        "--num-prompts",
        "4",
        "--seed",
        "3",
        *flags,
        "--ignore-eos",
        "--sim-args=--enable-prompt-tokens-details",
        name="agent",
    )
    assert succeeded(run), run.logs()[-3000:]
    o = build(seed=3, **AGENT)
    recs = run.records()
    by_session: dict[int, list[dict[str, Any]]] = {}
    for x in recs:
        by_session.setdefault(x["session"], []).append(x)
    assert len(by_session) == 4
    forks = 0
    for s, rs in by_session.items():
        g = graph_of(agent_session(o.agents, 3, s))
        assert sorted(x["extra"]["node"] for x in rs) == sorted(n.key for n in g.nodes if n.is_call)
        got = {x["extra"]["node"]: x for x in rs}
        for n in g.nodes:
            if n.is_call:
                assert (
                    got[n.key]["input_len"] == n.new_len
                    and got[n.key]["output_tokens"] == n.request.output_len
                )
            if n.is_call and n.agent and g.node(n.base).agent != n.agent:  # type: ignore[arg-type]
                forks += 1  # a subagent's first call: the parent's prompt is its cached prefix
                parent = got[g.node(n.base).key]  # type: ignore[arg-type]
                assert got[n.key]["cached_tokens"] >= (parent["prompt_tokens"] // SIM_BLOCK - 1) * SIM_BLOCK
    assert forks > 0
    assert run.result["completed"] == len(recs) and run.result["failed"] == 0
    s = run.result["sessions"]  # every session the agents started, against its seeded graph's calls
    assert (s["sessions"], s["completed"], s["cut"], s["failed"]) == (4, 4, 0, 0)
    assert s["calls_per_session"]["max"] == max(len(rs) for rs in by_session.values())


@pytest.mark.timeout(300)
def test_a_call_past_the_server_s_context_is_refused_before_any_load(tmp_path: Any) -> None:
    trace = tmp_path / "big.jsonl"
    nodes = [
        {"session_id": "s", "node": "a", "new_tokens": 3000, "output_tokens": 100},
        {"session_id": "s", "node": "b", "parents": ["a"], "new_tokens": 6000, "output_tokens": 100},
    ]
    trace.write_text("".join(json.dumps(n) + "\n" for n in nodes))
    run = vllm_locust(tmp_path, "--trace", str(trace), name="big")  # the simulator's context: 8192 tokens
    assert run.rc == USAGE
    said = "big.jsonl:2: session 's', node 'b': its prompt of 9100 tokens and answer of 100 pass the server's"
    assert said in run.err and "max_model_len 8192" in run.err
    assert not os.path.exists(os.path.join(run.run_dir, "records.jsonl"))


@pytest.mark.timeout(120)
def test_a_graph_with_a_cycle_is_refused_before_the_simulator_starts(tmp_path: Any) -> None:
    trace = tmp_path / "cycle.jsonl"
    nodes = [
        {"session_id": "s", "node": "a", "parents": ["b"], "new_tokens": 4},
        {"session_id": "s", "node": "b", "parents": ["a"], "new_tokens": 4},
    ]
    trace.write_text("".join(json.dumps(n) + "\n" for n in nodes))
    run = vllm_locust(tmp_path, "--trace", str(trace), name="cycle")
    assert run.rc == USAGE
    assert "cycle.jsonl:1: session 's', node 'a': its parents form a cycle through it" in run.err
    assert not os.path.exists(
        os.path.join(run.run_dir, "preflight.json")
    )  # refused before the server was asked
