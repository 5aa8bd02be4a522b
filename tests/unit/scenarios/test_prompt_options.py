"""The json and tools scenarios take their prompts from the prompt source, like chat: --dataset, --tokenizer
and --prefix-len change what they send (they used to be ignored there)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_users.options import Options, build
from vllm_users.scenarios import json_user, tools_user
from vllm_users.scenarios.base import LLMUser
from vllm_users.workload import source
from vllm_users.workload.prompts import LengthModel
from vllm_users.workload.ticket import Ticket

USERS = [(json_user.JsonUser, json_user.INSTRUCTION), (tools_user.ToolsUser, tools_user.INSTRUCTION)]


def _options(**kw: Any) -> Options:
    base = dict(
        input_len=40,
        output_len=16,
        range_ratio=0.0,
        seed=3,
        endpoint="chat",
        dataset="",
        dataset_format="auto",
        tokenizer="",
        prefix_len=0,
        cache_rate=0.0,
        num_prefixes=1,
        temperature=0.0,
        no_stream=False,
        ignore_eos=False,
        schema_complexity="flat",
        json_schema="",
        json_mode="",
        tool_choice="required",
        tool_followup=False,
    )
    base.update(kw)
    return build(**base)


def _user(cls: type[LLMUser], monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    user = object.__new__(cls)  # no Locust runtime: only the prompt path is exercised
    user.options = _options(**kw)
    user.model = "m"
    monkeypatch.setattr(user, "length_model", lambda: LengthModel(tokens_per_word=1.0))
    user.setup_scenario()
    return user


@pytest.mark.parametrize(("cls", "instruction"), USERS)
def test_random_prompts_keep_the_requested_length(cls: type[LLMUser], instruction: str, monkeypatch) -> None:
    spec = _user(cls, monkeypatch).build_request(Ticket(5))
    (msg,) = spec.body["messages"]
    assert msg["role"] == "user" and msg["content"].startswith(instruction)
    assert len(msg["content"].split()) == 40 == spec.input_len  # the instruction is part of --input-len


@pytest.mark.parametrize(("cls", "instruction"), USERS)
def test_prefix_len_puts_a_shared_system_prompt_first(
    cls: type[LLMUser], instruction: str, monkeypatch
) -> None:
    spec = _user(cls, monkeypatch, prefix_len=24, cache_rate=1.0).build_request(Ticket(5))
    system, user = spec.body["messages"]
    assert system["role"] == "system" and len(system["content"].split()) == 24
    assert user["content"].startswith(instruction) and spec.input_len == 40 + 24
    other = _user(cls, monkeypatch, prefix_len=24, cache_rate=1.0).build_request(Ticket(6))
    assert other.body["messages"][0] == system  # shared: the server can cache it


@pytest.mark.parametrize(("cls", "instruction"), USERS)
def test_dataset_prompts_are_sent(cls: type[LLMUser], instruction: str, monkeypatch, tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(
        "\n".join(json.dumps({"prompt": f"dataset question number {i}"}) for i in range(3)) + "\n"
    )
    user = _user(cls, monkeypatch, dataset=str(path))
    texts = {user.build_request(Ticket(i)).body["messages"][-1]["content"] for i in range(6)}
    assert texts == {instruction + f"dataset question number {i}" for i in range(3)}


@pytest.mark.parametrize(("cls", "instruction"), USERS)
def test_tokenizer_cuts_prompts_to_exact_token_counts(
    cls: type[LLMUser], instruction: str, monkeypatch
) -> None:
    def two_per_word(text: str) -> int:  # a stand-in tokenizer: every word is two tokens
        return 2 * len(text.split())

    monkeypatch.setattr(source, "load_tokenizer", lambda path: two_per_word)
    spec = _user(cls, monkeypatch, tokenizer="/some/tokenizer").build_request(Ticket(1))
    text = spec.body["messages"][-1]["content"].removeprefix(instruction)
    assert two_per_word(text) == 40 - len(
        instruction.split()
    )  # exact under the tokenizer, not 1 word = 1 token
