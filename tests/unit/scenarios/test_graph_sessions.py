"""A graph trace replayed by the trace user: each node once its parents completed, a subagent's prompt
opening with its parent's history, its answer opening the parent's next call, waits through think(), and a
failed call cutting what comes after it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gevent
import pytest

from vllm_users.options import build
from vllm_users.scenarios.request_spec import RequestSpec
from vllm_users.scenarios.trace_user import TraceUser
from vllm_users.workload.prompts import LengthModel
from vllm_users.workload.ticket import Ticket

GRAPH = [
    {"session_id": "s", "node": "a", "input_tokens": 30, "output_tokens": 4},
    {"session_id": "s", "node": "tool", "parents": ["a"], "kind": "wait", "wait_ms": 200},
    {
        "session_id": "s",
        "node": "c1",
        "parents": ["a"],
        "subagent": "sub",
        "new_tokens": 8,
        "output_tokens": 3,
    },
    {
        "session_id": "s",
        "node": "c2",
        "parents": ["c1"],
        "subagent": "sub",
        "new_tokens": 5,
        "output_tokens": 3,
    },
    {"session_id": "s", "node": "b", "parents": ["tool", "c2"], "new_tokens": 6, "output_tokens": 4},
]


def _user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: str | None = None) -> tuple[Any, list[Any]]:
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in GRAPH))
    user = object.__new__(TraceUser)  # no Locust runtime: the request path only
    user.options = build(trace=str(path), output_len=99)
    user.model = "base"
    monkeypatch.setattr(user, "length_model", lambda: LengthModel(tokens_per_word=1.0))
    user.setup_scenario()
    log: list[Any] = []

    def send(spec: RequestSpec, ticket: Ticket, scenario: str | None = None) -> Any:
        key = spec.context["node"][0]
        log.append(("start", key, spec))
        gevent.sleep(0.01)  # in flight: a node beside it may start meanwhile
        log.append(("end", key, spec))
        return SimpleNamespace(ok=key != fail, text=f"answer of {key}")

    def think(seconds: float) -> bool:
        log.append(("think", seconds, None))
        return True

    monkeypatch.setattr(user, "send", send)
    monkeypatch.setattr(user, "think", think)
    return user, log


def test_each_node_starts_once_its_parents_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user, log = _user(tmp_path, monkeypatch)
    user.flow(Ticket(0))
    events = [(e, k) for e, k, _ in log]
    assert events.index(("end", "a")) < events.index(("start", "c1"))
    assert ("think", 0.2) in events and events.index(("end", "a")) < events.index(("think", 0.2))
    assert events.index(("start", "c1")) < events.index(("end", "c1")) < events.index(("start", "c2"))
    assert events.index(("end", "c2")) < events.index(("start", "b"))  # the join waits for the subagent
    assert [k for e, k in events if e == "start"] == ["a", "c1", "c2", "b"]


def test_histories_fork_and_join(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user, log = _user(tmp_path, monkeypatch)
    user.flow(Ticket(0))
    sent = {k: s for e, k, s in log if e == "start"}
    a = sent["a"].body["messages"]
    c1, c2, b = (sent[k].body["messages"] for k in ("c1", "c2", "b"))
    assert len(a) == 1 and len(a[0]["content"].split()) == 30 == sent["a"].input_len
    history_a = [*a, {"role": "assistant", "content": "answer of a"}]
    assert c1[:2] == history_a and len(c1[2]["content"].split()) == 8  # the child starts from a's context
    assert c2[:4] == [*c1, {"role": "assistant", "content": "answer of c1"}]  # its own history grows
    assert b[:2] == history_a and len(b) == 3  # the parent goes on from its own history, not the child's
    joined, new = b[2]["content"].split("\n\n")
    assert joined == "answer of c2" and len(new.split()) == 6  # the subagent's answer opens the next call
    assert [sent[k].turn for k in ("a", "c1", "c2", "b")] == [0, 1, 2, 3]
    assert {sent[k].session for k in sent} == {0} and all(s.want_text for s in sent.values())
    assert sent["c1"].context["node"] == ("c1", "sub", 1) and sent["b"].context["node"] == ("b", None, 0)


def test_a_failed_call_cuts_the_nodes_after_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user, log = _user(tmp_path, monkeypatch, fail="c1")
    user.flow(Ticket(0))
    assert [k for e, k, _ in log if e == "start"] == ["a", "c1"]  # neither c2 nor the join b is sent


def test_a_run_that_stops_starts_no_more_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user, log = _user(tmp_path, monkeypatch)
    stop = iter([False, True])
    monkeypatch.setattr(user, "stopping", lambda: next(stop, True))
    user.flow(Ticket(0))
    assert [k for e, k, _ in log if e == "start"] == ["a"]


def test_a_graph_call_s_record_names_its_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user, log = _user(tmp_path, monkeypatch)
    user.flow(Ticket(0))
    spec = next(s for e, k, s in log if k == "c1")
    rec = SimpleNamespace(extra=None, endpoint="chat")
    user.check(spec, SimpleNamespace(body=b""), rec)
    assert rec.extra == {"node": "c1", "agent": "sub", "depth": 1}
