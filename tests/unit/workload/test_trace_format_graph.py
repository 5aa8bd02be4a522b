"""Our graph JSON lines: nodes with their parents, kinds, tokens and subagents; a session starting at its least
timestamp; detection; and a bad line naming the trace, the session and the node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_users.errors import TraceError
from vllm_users.workload.trace_formats import detect_format, load_trace

LINES = [
    {"session_id": 7, "node": 1, "input_tokens": 50, "output_tokens": 5, "timestamp": 2.5, "model": "m"},
    {"session_id": 7, "node": "w", "parents": [1], "kind": "wait", "wait_ms": 40},
    {"session_id": 7, "node": "c", "parents": [1], "subagent": "sub", "new_tokens": 9},
    {"session_id": "b", "node": "x", "new_tokens": 3, "timestamp": 1.0},
]


def _write(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    p = tmp_path / "g.jsonl"
    p.write_text("".join(json.dumps(d) + "\n" for d in lines))
    return p


def test_nodes_and_sessions(tmp_path: Path) -> None:
    path = _write(tmp_path, LINES)
    assert detect_format(str(path)) == "graph"
    trace = load_trace(str(path))
    assert trace.format == "graph" and trace.calls == 3 and len(trace.requests) == 4
    x, one, w, c = trace.requests  # session b starts first (1.0 s), then session 7 (2.5 s) at offset 1.5
    assert (x.session_id, x.offset_s, x.input_len) == ("b", 0.0, 3)
    assert (one.node, one.context_len, one.input_len, one.output_len, one.model) == ("1", 50, None, 5, "m")
    assert (w.kind, w.wait_ms, w.parents, w.offset_s) == ("wait", 40.0, ("1",), 1.5)
    assert (c.agent, c.input_len, c.output_len, c.parents, c.turn) == ("sub", 9, None, ("1",), 2)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ({"node": "n", "kind": "wait", "wait_ms": -3}, "node 'n': field 'wait_ms': expected a number >= 0"),
        ({"node": "n", "parents": ["ghost"], "new_tokens": 2}, "node 'n': its parent 'ghost' is not a node"),
        ({"node": "n", "output_tokens": 2}, "node 'n': a call needs 'input_tokens' or 'new_tokens'"),
        ({"node": "n", "kind": "tool", "wait_ms": 1}, "node 'n': field 'kind': expected call or wait"),
        ({"node": "n", "new_tokens": 0}, "node 'n': field 'new_tokens': expected an integer >= 1"),
    ],
)
def test_a_bad_line_names_the_trace_session_and_node(tmp_path: Path, line: dict[str, Any], said: str) -> None:
    path = _write(tmp_path, [{"session_id": "s", "node": "a", "new_tokens": 4}, {"session_id": "s", **line}])
    with pytest.raises(TraceError) as e:
        load_trace(str(path))
    assert f"{path}:2: session 's', {said}" in str(e.value) and "\n" not in str(e.value)


def test_a_cycle_is_refused(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"session_id": "s", "node": "a", "parents": ["b"], "new_tokens": 4},
            {"session_id": "s", "node": "b", "parents": ["a"], "new_tokens": 4},
        ],
    )
    with pytest.raises(TraceError, match=r"g.jsonl:1: session 's', node 'a': its parents form a cycle"):
        load_trace(str(path))


def test_a_session_cut_by_num_prompts_counts_only_the_calls_it_can_send(tmp_path: Path) -> None:
    from vllm_users.workload.trace_schedule import build_plan

    lines = [
        {
            "session_id": "s",
            "node": "b",
            "parents": ["a"],
            "new_tokens": 4,
        },  # its parent comes later in the file
        {"session_id": "s", "node": "a", "new_tokens": 4},
        {"session_id": "s", "node": "c", "parents": ["a"], "new_tokens": 4},
    ]
    path = _write(tmp_path, lines)
    assert build_plan(load_trace(str(path))).session_calls() == {0: 3}
    assert build_plan(load_trace(str(path), limit=2)).session_calls() == {0: 2}
    assert build_plan(load_trace(str(path), limit=1)).session_calls() == {0: 0}  # b alone: never sent


def test_a_call_past_the_context_names_its_node(tmp_path: Path) -> None:
    from vllm_users.workload.trace_schedule import build_plan, check_graph_context

    lines = [
        {"session_id": "s", "node": "a", "input_tokens": 500, "output_tokens": 100},
        {"session_id": "s", "node": "b", "parents": ["a"], "input_tokens": 900, "output_tokens": 100},
    ]
    plan = build_plan(load_trace(str(_write(tmp_path, lines))))
    check_graph_context(plan, 1000)  # b: 900 + 100 fits exactly
    check_graph_context(plan, None)  # a server that lists no length: nothing to check
    with pytest.raises(
        TraceError, match=r"g.jsonl:2: session 's', node 'b': its prompt of 900 tokens and answer"
    ):
        check_graph_context(plan, 999)
