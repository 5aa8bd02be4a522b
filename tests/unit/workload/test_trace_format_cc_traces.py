"""The cc-traces reader: a recorded coding-agent session as a graph (the main agent's chain, a subagent forked
from the call before its marker and joined by the call after it, a background one joined by none, think times
as waits), its detection (a file, JSON lines of sessions, a directory) and its bad fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_users.errors import TraceError
from vllm_users.workload.session_graph import graph_of
from vllm_users.workload.trace_formats import detect_format, load_trace


def _call(t: float, inp: int, out: int, **kw: Any) -> dict[str, Any]:
    return {"t": t, "type": "s", "model": "m", "in": inp, "out": out, "hash_ids": [1, 2], **kw}


TRACE = {
    "id": "sess-1",
    "models": ["m"],
    "block_size": 64,
    "hash_id_scope": "local",
    "requests": [
        _call(0.0, 100, 10, api_time=2.0),
        {
            "t": 3.0,
            "type": "subagent",
            "agent_id": "agent_001",
            "subagent_type": "Explore",
            "status": "completed",
            "models": ["m"],
            "requests": [
                _call(3.1, 300, 20, think_time=0.0),
                _call(5.0, 340, 5, think_time=0.5),
                {
                    "t": 6.0,
                    "type": "subagent",
                    "agent_id": "agent_002",
                    "subagent_type": "x",
                    "status": "completed",
                    "models": ["m"],
                    "requests": [_call(6.0, 500, 5)],
                },
            ],
        },
        {
            "t": 3.0,
            "type": "subagent",
            "agent_id": "agent_003",
            "subagent_type": "x",
            "status": "async_launched",
            "models": ["m"],
            "requests": [_call(3.0, 20, 5)],
        },
        _call(9.0, 160, 10, think_time=1.5),
    ],
}


def _write(tmp_path: Path, obj: Any = TRACE, name: str = "trace_0001.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(obj, indent=2))
    return p


def test_a_session_with_subagents_is_its_graph(tmp_path: Path) -> None:
    trace = load_trace(str(_write(tmp_path)))
    assert trace.format == "cc-traces" and trace.calls == 6
    g = graph_of(trace.requests)
    calls = [n for n in g.nodes if n.is_call]
    main0, sub_a, sub_b, nested, background, main1 = calls
    assert (main0.agent, main0.new_len, main0.request.output_len) == ("", 100, 10)
    assert (sub_a.agent, sub_a.base, sub_a.depth, sub_a.context_len) == ("agent_001", main0.key, 1, 110)
    assert sub_a.new_len == 300 - 110  # its recorded prompt less the parent's history
    wait = g.node(sub_b.parents[0])
    assert not wait.is_call and wait.wait_s == 0.5 and wait.parents == (sub_a.key,)
    assert (nested.agent, nested.depth, nested.base) == ("agent_002", 2, sub_b.key)
    # a subagent recorded with a prompt shorter than its parent's history starts a context of its own
    assert (background.agent, background.base, background.reset, background.new_len) == (
        "agent_003",
        None,
        True,
        20,
    )
    # the parent's next call waits for the subagent (its nested child included), not for the background one
    before = g.node(main1.parents[0])
    assert not before.is_call and before.wait_s == 1.5
    ends = {g.node(p).agent for p in before.parents}
    assert ends == {"", "agent_001"} and background.key not in before.parents
    assert main1.base == before.key and main1.joins
    assert all(r.offset_s == 0.0 for r in trace.requests) and trace.requests[0].session_id == "sess-1"


def test_no_think_time_is_the_recorded_gap_less_the_server_s_time(tmp_path: Path) -> None:
    obj = {"id": "s", "requests": [_call(0.0, 10, 5, api_time=1.0), _call(4.0, 30, 5)], "block_size": 64}
    g = graph_of(load_trace(str(_write(tmp_path, obj))).requests)
    assert [n.wait_s for n in g.nodes if not n.is_call] == [3.0]


def test_a_directory_and_json_lines_of_sessions(tmp_path: Path) -> None:
    d = tmp_path / "corpus"
    d.mkdir()
    _write(d, TRACE, "a.json")
    _write(d, {**TRACE, "id": "sess-2"}, "b.json")
    assert detect_format(str(d)) == "cc-traces"
    trace = load_trace(str(d))
    assert {r.session_id for r in trace.requests} == {"sess-1", "sess-2"} and trace.calls == 12
    lines = tmp_path / "corpus.jsonl"
    lines.write_text(json.dumps(TRACE) + "\n" + json.dumps(TRACE) + "\n")
    assert detect_format(str(lines)) == "cc-traces"
    sessions = {r.session_id for r in load_trace(str(lines)).requests}
    assert sessions == {"sess-1", "sess-1#2"}  # the same id twice: two sessions


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"think_time": -1}, "session 'sess-1', node requests[0]: field 'think_time': expected a number"),
        ({"in": "many"}, "node requests[0]: field 'in': expected an integer >= 0"),
        ({"type": "x"}, 'field \'type\': expected "n", "s" or "subagent"'),
    ],
)
def test_a_bad_field_names_the_file_session_and_request(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    obj = {**TRACE, "requests": [{**TRACE["requests"][0], **change}]}  # type: ignore[dict-item]
    with pytest.raises(TraceError) as e:
        load_trace(str(_write(tmp_path, obj)), "cc-traces")
    assert said in str(e.value) and "trace_0001.json" in str(e.value) and "\n" not in str(e.value)
