"""The session graph: run order, each call's history, joins and new length from the trace's counts, the
errors of a bad graph (cycle, missing parent, negative wait), and the scheduler's fork, join and cut."""

from __future__ import annotations

from typing import Any

import pytest

from vllm_users.errors import TraceError
from vllm_users.workload.graph_run import GraphRun
from vllm_users.workload.session_graph import check_nodes, graph_of, path_graph
from vllm_users.workload.trace import TraceRequest


def _n(node: str, *parents: str, line: int = 1, **kw: Any) -> TraceRequest:
    return TraceRequest(0.0, session_id="s", node=node, parents=parents, line=line, **kw)


# main: a -> wait -> b (joins the subagent); subagent `sub`: c1 -> c2, forked from a
AGENT = [
    _n("a", context_len=40, output_len=5),
    _n("w", "a", kind="wait", wait_ms=100.0),
    _n("c1", "a", agent="sub", input_len=10, output_len=6),
    _n("c2", "c1", agent="sub", context_len=80, output_len=7),
    _n("b", "w", "c2", context_len=70, output_len=5),
]


def test_a_subagent_forks_from_its_parent_s_history_and_joins_the_next_call() -> None:
    g = graph_of(AGENT)
    a, w, c1, c2, b = (g.node(k) for k in ("a", "w", "c1", "c2", "b"))
    assert (a.base, a.new_len, a.context_len, a.depth) == (None, 40, 0, 0)
    assert (w.base, w.wait_s, w.is_call) == ("a", 0.1, False)
    # the child continues a's history: a's 40 prompt tokens and 5 answer tokens, then 10 of its own
    assert (c1.base, c1.context_len, c1.new_len, c1.agent, c1.depth) == ("a", 45, 10, "sub", 1)
    assert (c2.base, c2.context_len, c2.new_len) == (
        "c1",
        61,
        80 - 61,
    )  # its recorded prompt less the history
    # the join: the parent's next call continues its own history (through the wait) and opens with c2's answer
    assert (b.base, b.joins, b.context_len, b.new_len, b.depth) == ("w", ("c2",), 45 + 7, 70 - 52, 0)
    assert [n.turn for n in g.nodes if n.is_call] == [0, 1, 2, 3] and g.calls == 4


def test_a_prompt_shorter_than_its_history_restarts_it() -> None:
    g = graph_of([_n("a", context_len=100, output_len=50), _n("b", "a", context_len=30, output_len=5)])
    b = g.node("b")
    assert (b.reset, b.base, b.context_len, b.new_len) == (True, None, 0, 30)


def test_the_run_order_puts_parents_first_else_the_file_s_order() -> None:
    g = graph_of([_n("late", "early"), _n("early"), _n("other")])
    assert [n.key for n in g.nodes] == ["early", "late", "other"]


@pytest.mark.parametrize(
    ("nodes", "said"),
    [
        (
            [_n("a", "b", line=1), _n("b", "a", line=2)],
            "test.jsonl:1: session 's', node 'a': its parents form a cycle",
        ),
        ([_n("a", "a", line=3)], "node 'a': a node cannot be its own parent"),
        (
            [_n("a", line=1), _n("b", "zz", line=2)],
            "test.jsonl:2: session 's', node 'b': its parent 'zz' is not",
        ),
        (
            [_n("a", kind="wait", wait_ms=-5.0, line=4)],
            "test.jsonl:4: session 's', node 'a': a wait of -5.0 ms",
        ),
        ([_n("a", line=1), _n("a", line=2)], "test.jsonl:2: session 's', node 'a': a second node of that id"),
    ],
)
def test_a_bad_graph_is_one_line_naming_the_trace_session_and_node(
    nodes: list[TraceRequest], said: str
) -> None:
    with pytest.raises(TraceError) as e:
        check_nodes(nodes, "test.jsonl")
    assert said in str(e.value) and "\n" not in str(e.value)


def test_nodes_cut_from_their_parents_by_the_window_are_left_out() -> None:
    g = graph_of([_n("b", "a"), _n("c", "b"), _n("d")])
    assert [n.key for n in g.nodes] == ["d"]


def test_the_scheduler_forks_joins_and_hands_each_node_out_once() -> None:
    run = GraphRun(graph_of(AGENT))
    assert [n.key for n in run.take_ready()] == ["a"] and run.take_ready() == []
    run.finish("a", True)
    assert [n.key for n in run.take_ready()] == ["w", "c1"]  # the fork: both at once, in run order
    run.finish("w", True)
    assert run.take_ready() == []  # b waits for the subagent too
    run.finish("c1", True)
    assert [n.key for n in run.take_ready()] == ["c2"]
    run.finish("c2", True)
    assert [n.key for n in run.take_ready()] == ["b"]
    run.finish("b", True)
    assert run.idle and run.outcome == "completed" and run.completed == ["a", "w", "c1", "c2", "b"]


def test_a_failed_node_blocks_every_node_after_it_and_the_session_is_cut() -> None:
    run = GraphRun(graph_of(AGENT))
    run.take_ready()
    run.finish("a", True)
    run.take_ready()
    run.finish("c1", False)  # the subagent's first call failed: c2 and the join never start
    run.finish("w", True)
    assert run.take_ready() == [] and run.idle and run.outcome == "cut" and run.failed == ["c1"]
    with pytest.raises(ValueError):
        run.finish("b", True)  # never started


def test_a_linear_session_is_one_path_with_its_think_times_as_waits() -> None:
    turns = [
        TraceRequest(0.0, session_id="s", turn=0, input_len=5),
        TraceRequest(1.0, session_id="s", turn=1, input_len=6, think_ms=250.0),
        TraceRequest(2.0, session_id="s", turn=2, input_len=7),
    ]
    g = path_graph(turns)
    assert [(n.key, n.parents, n.wait_s) for n in g.nodes] == [
        ("turn-0", (), 0.0),
        ("wait-1", ("turn-0",), 0.25),
        ("turn-1", ("wait-1",), 0.0),
        ("turn-2", ("turn-1",), 0.0),
    ]
    assert [n.turn for n in g.nodes if n.is_call] == [0, 1, 2]
