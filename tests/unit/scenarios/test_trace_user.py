"""The trace user: a line's body (model, priority, messages, max_tokens), its tenant as the request class, and a
session's turns in order, think_ms after the one before, carrying the real answers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_users.options import build
from vllm_users.scenarios.request_spec import RequestSpec
from vllm_users.scenarios.trace_user import TraceUser
from vllm_users.workload.prompts import LengthModel
from vllm_users.workload.ticket import Ticket

LINES = [
    '{"timestamp": 0.0, "input_len": 30, "output_len": 7, "model": "lora-a", "priority": 2, "tenant": "web"}',
    '{"timestamp": 0.5, "session_id": "s", "turn": 0, "prompt": "first question", "output_len": 5}',
    '{"timestamp": 0.6, "messages": [{"role": "system", "content": "terse"}, {"role": "user", "content": "hi"}]}',
    '{"timestamp": 2.0, "session_id": "s", "turn": 1, "think_ms": 1500, "input_len": 12, "output_len": 5}',
    '{"timestamp": 3.0, "session_id": "s", "turn": 2, "think_ms": 250, "prompt": "third"}',
]


def _user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str] = LINES, **kw: Any) -> Any:
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    user = object.__new__(TraceUser)  # no Locust runtime: the request path only
    user.options = build(trace=str(path), output_len=99, **kw)
    user.model = "base"
    monkeypatch.setattr(user, "length_model", lambda: LengthModel(tokens_per_word=1.0))
    user.setup_scenario()
    return user


def test_a_line_becomes_its_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = _user(tmp_path, monkeypatch)
    spec = user.build_request(Ticket(0))
    b = spec.body
    assert (b["model"], b["priority"], b["max_tokens"], spec.request_class) == ("lora-a", 2, 7, "web")
    assert len(b["messages"][0]["content"].split()) == 30 == spec.input_len
    given = user.build_request(Ticket(2))
    assert (
        given.body["messages"][0] == {"role": "system", "content": "terse"} and given.body["max_tokens"] == 99
    )
    assert given.body["model"] == "base" and "priority" not in given.body and given.input_len is None


def test_completions_send_the_prompt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _user(tmp_path, monkeypatch, endpoint="completions").build_request(Ticket(0))
    assert not spec.chat and len(spec.body["prompt"].split()) == 30 and "messages" not in spec.body


def _replies(user: Any, monkeypatch: pytest.MonkeyPatch, fail_at: int | None = None) -> list[Any]:
    sent: list[Any] = []

    def send(spec: RequestSpec, ticket: Ticket, scenario: str | None = None) -> Any:
        k = len(sent)
        sent.append((spec, scenario, list(thought)))
        return SimpleNamespace(ok=k != fail_at, text=f"answer {k}")

    thought: list[float] = []
    monkeypatch.setattr(user, "send", send)

    def think(seconds: float) -> bool:
        thought.append(seconds)
        return True

    monkeypatch.setattr(user, "think", think)
    return sent


def test_a_session_sends_its_turns_after_think_time_with_the_answers(tmp_path: Path, monkeypatch) -> None:
    user = _user(tmp_path, monkeypatch)
    sent = _replies(user, monkeypatch)
    user.flow(Ticket(1))
    assert [s.turn for s, _, _ in sent] == [0, 1, 2] and {s.session for s, _, _ in sent} == {1}
    assert [t for _, _, t in sent] == [[], [1.5], [1.5, 0.25]]  # think_ms before turns 1 and 2, none before 0
    last = sent[2][0].body["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    assert last[0]["content"] == "first question" and last[1]["content"] == "answer 0"
    assert last[3]["content"] == "answer 1" and last[4]["content"] == "third"
    assert len(last[2]["content"].split()) == 12 and all(s.want_text for s, _, _ in sent)


def test_a_failed_turn_ends_its_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = _user(tmp_path, monkeypatch)
    sent = _replies(user, monkeypatch, fail_at=1)
    user.flow(Ticket(1))
    assert len(sent) == 2


def test_the_line_s_scenario_names_the_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = _user(tmp_path, monkeypatch)
    sent = _replies(user, monkeypatch)
    user.flow(Ticket(0))
    assert sent[0][1] == "trace" and not sent[0][0].want_text


ENDPOINT_LINES = [
    '{"timestamp": 0.0, "input_len": 20, "output_len": 3, "images": 2}',
    '{"timestamp": 0.1, "input_len": 15, "endpoint": "embeddings", "model": "emb", "tenant": "search"}',
    '{"timestamp": 0.2, "input_len": 10, "output_len": 4, "endpoint": "responses"}',
    '{"timestamp": 0.3, "input_len": 8, "endpoint": "rerank"}',
    '{"timestamp": 0.4, "prompt": "which one", "endpoint": "score"}',
    '{"timestamp": 0.5, "input_len": 9, "output_len": 2, "endpoint": "completions", "images": 0}',
]


def test_a_line_s_endpoint_and_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = _user(tmp_path, monkeypatch, ENDPOINT_LINES, rerank_docs=3)
    chat, emb, resp, rerank, score, comp = (user.build_request(Ticket(i)) for i in range(6))
    assert (
        chat.endpoint is None and chat.chat and chat.context["images"] == 2
    )  # LLMUser.send attaches exactly 2
    assert emb.endpoint == "embeddings" and not emb.chat and emb.request_class == "search"
    assert set(emb.body) == {"model", "input", "encoding_format"} and emb.body["model"] == "emb"
    assert len(emb.body["input"].split()) == 15 == emb.input_len and "stream" not in emb.body
    assert emb.context == {"items": 1}
    assert (
        resp.endpoint == "responses" and "messages" not in resp.body and resp.body["max_output_tokens"] == 4
    )
    assert len(resp.body["input"][-1]["content"].split()) == 10 and "images" not in resp.context
    assert rerank.endpoint == "rerank" and rerank.context == {"items": 3} and rerank.body["model"] == "base"
    docs = rerank.body["documents"]
    assert len(docs) == 3 == len(set(docs)) and all(len(d.split()) == 8 for d in docs)
    assert len(rerank.body["query"].split()) == 8 and rerank.input_len == 8 * 4
    assert score.body["text_1"] == "which one" == score.body["text_2"][0] and score.input_len is None
    assert comp.endpoint is None and not comp.chat and comp.context["images"] == 0  # 0: none, not --images
    # a pooling answer must answer each input, as the pooling users check
    rec = SimpleNamespace(endpoint="rerank", error=None, error_detail=None)
    user.check(rerank, SimpleNamespace(body={"results": [{}, {}]}), rec)
    assert rec.error == "bad_response" and "2 items for 3 inputs" in rec.error_detail
    ok = SimpleNamespace(endpoint="embeddings", error=None, error_detail=None)
    user.check(emb, SimpleNamespace(body={"data": [{}]}), ok)
    assert ok.error is None
