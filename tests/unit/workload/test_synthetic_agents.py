"""Synthetic agent sessions: the same seed and index give the same graph, the figures' means are the options',
subagents fork from a call and join the parent's next one down to --agent-depth, a context past
--agent-max-context compacts, and impossible values are one-line errors."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from vllm_users.errors import UsageError
from vllm_users.options import build
from vllm_users.workload.session_graph import graph_of
from vllm_users.workload.synthetic_agents import agent_session


def _o(**kw: Any) -> Any:
    return build(**kw).agents


def test_a_session_is_its_seed_and_index() -> None:
    o = _o(agent_turns=12, agent_subagent_rate=0.3)
    assert agent_session(o, 5, 3) == agent_session(o, 5, 3)
    assert agent_session(o, 5, 3) != agent_session(o, 5, 4) != agent_session(o, 6, 3)


def test_the_means_are_the_options() -> None:
    o = _o(
        agent_turns=20,
        agent_new_tokens=400,
        agent_output_tokens=100,
        agent_tool_ms=500,
        agent_subagent_rate=0,
    )
    graphs = [graph_of(agent_session(o, 1, i)) for i in range(600)]
    calls = [g.calls for g in graphs]
    later = [n.new_len for g in graphs for n in g.nodes if n.is_call and n.turn > 0]
    out = [n.request.output_len for g in graphs for n in g.nodes if n.is_call]
    waits = [n.wait_s for g in graphs for n in g.nodes if not n.is_call]
    assert statistics.mean(calls) == pytest.approx(20, rel=0.08)
    assert statistics.mean(later) == pytest.approx(400, rel=0.05)  # type: ignore[arg-type]
    assert statistics.mean(out) == pytest.approx(100, rel=0.05)  # type: ignore[arg-type]
    assert statistics.mean(waits) == pytest.approx(0.5, rel=0.05)
    assert all(
        n.new_len == o.agent_first_tokens == 450 for g in graphs for n in g.nodes if n.is_call and n.turn == 0
    )
    assert len(waits) == sum(calls) - len(graphs)  # a tool wait after every call but a session's last


def test_subagents_fork_from_a_call_and_join_the_next_one_down_to_the_depth() -> None:
    o = _o(agent_turns=6, agent_subagent_rate=1.0, agent_subagent_turns=3, agent_depth=2, agent_tool_ms=0)
    g = graph_of(agent_session(o, 2, 0))
    subs = [n for n in g.nodes if n.agent]
    assert subs and max(n.depth for n in g.nodes) == 2
    firsts = {}
    for n in subs:
        firsts.setdefault(n.agent, n)
    forked = [f for f in firsts.values() if not f.reset]  # (a fork past --agent-max-context compacts at once)
    assert forked
    for first in forked:
        fork = g.node(first.base)  # type: ignore[arg-type]
        assert fork.is_call and fork.agent != first.agent and first.depth == fork.depth + 1
    main = [n for n in g.nodes if n.is_call and not n.agent]
    assert any(n.joins for n in main[1:])  # the parent's next call takes a subagent's answer
    assert all(g.node(j).agent for n in main for j in n.joins)


def test_a_context_past_the_bound_compacts() -> None:
    o = _o(
        agent_turns=40,
        agent_new_tokens=500,
        agent_output_tokens=50,
        agent_max_context=3000,
        agent_subagent_rate=0,
    )
    g = graph_of(agent_session(o, 3, 0))
    assert any(n.reset for n in g.nodes)
    assert all(
        n.context_len + (n.new_len or 0) + (n.request.output_len or 0) <= 3000 for n in g.nodes if n.is_call
    )


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"agent_turns": 0.5}, "means of counts >= 1"),
        ({"agent_subagent_rate": 1.5}, "a chance from 0 to 1"),
        ({"agent_max_context": 100}, "must hold the first prompt"),
    ],
)
def test_impossible_values_are_one_line_errors(kw: dict[str, Any], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        _o(**kw).check()
