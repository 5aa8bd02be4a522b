"""ShareGPT and JSONL datasets: parsing, determinism, and one-line errors naming file and line."""

from __future__ import annotations

import json
import os

import pytest

from vllm_users.workload.datasets import DatasetError, DatasetPrompts, load_dataset
from vllm_users.workload.prompts import LengthModel

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data")
SHAREGPT = os.path.join(DATA, "sharegpt_sample.json")
JSONL = os.path.join(DATA, "prompts_sample.jsonl")


def test_sharegpt_sample_single_and_multi_turn() -> None:
    entries = load_dataset(SHAREGPT)
    assert len(entries) == 24
    assert any(len(e.user_turns) == 1 for e in entries) and any(len(e.user_turns) >= 3 for e in entries)
    sys_first = [e for e in entries if e.messages[0]["role"] == "system"]
    assert sys_first and all(e.messages[-1]["role"] == "user" for e in entries)
    assert all(e.reference_words for e in entries)
    assert load_dataset(SHAREGPT, "sharegpt") == entries


def test_jsonl_sample_prompt_and_messages() -> None:
    entries = load_dataset(JSONL)
    assert len(entries) == 20
    assert any(e.max_tokens for e in entries) and any(e.max_tokens is None for e in entries)
    assert any(len(e.messages) == 2 for e in entries)


def test_dataset_prompts_deterministic_and_lengths() -> None:
    entries = load_dataset(JSONL)
    a = DatasetPrompts(entries, 77, seed=5)
    b = DatasetPrompts(entries, 77, seed=5)
    c = DatasetPrompts(entries, 77, seed=6)
    assert [a.get(i) for i in range(40)] == [b.get(i) for i in range(40)]
    assert [a.get(i).messages for i in range(20)] != [c.get(i).messages for i in range(20)]
    outs = {a.get(i).output_len for i in range(20)}
    assert 77 in outs and 16 in outs  # --output-len when the line has no max_tokens
    comp = DatasetPrompts(entries, 77, seed=5, chat=False).get(0)
    assert comp.messages is None and comp.text
    sg = DatasetPrompts(load_dataset(SHAREGPT), 99, lengths=LengthModel(tokens_per_word=1.0)).get(0)
    assert sg.output_len != 99  # ShareGPT: the reference reply's length


@pytest.mark.parametrize(
    ("content", "fmt", "match"),
    [
        ("", "auto", "is empty"),
        ("   \n\n", "jsonl", "is empty"),
        ('{"prompt": "a"}\n{"prompt": "b"\n', "jsonl", "line 2: not valid JSON"),
        ('{"prompt": "a"}\n\n{"text": "b"}\n', "jsonl", "line 3: needs a non-empty 'prompt'"),
        ('{"prompt": "a", "max_tokens": -1}\n', "jsonl", "line 1: max_tokens must be a positive integer"),
        (
            '{"messages": [{"role": "wizard", "content": "x"}]}\n',
            "jsonl",
            "line 1: each message needs a role",
        ),
        (
            '[\n {"conversations": [{"from": "human", "value": "hi"}]},\n {"nope": 1}\n]',
            "sharegpt",
            "line 3 \\(entry 1\\): a ShareGPT entry needs a 'conversations' list",
        ),
        (
            '[\n {"conversations": [{"from": "human", "value": "hi"}]},\n {"conversations": [}\n]',
            "sharegpt",
            "line 3: not valid JSON",
        ),
        ('[{"conversations": [{"from": "alien", "value": "hi"}]}]', "auto", "unknown speaker"),
        ('[{"conversations": [{"from": "gpt", "value": "only a reply"}]}]', "auto", "has no usable prompts"),
        ('{"prompt": "x"}', "sharegpt", "JSON array"),
    ],
)
def test_bad_files_one_line_errors(tmp_path, content: str, fmt: str, match: str) -> None:
    path = tmp_path / ("d.json" if fmt != "jsonl" else "d.jsonl")
    path.write_text(content)
    with pytest.raises(DatasetError, match=match) as e:
        load_dataset(str(path), fmt)
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg


def test_missing_file_and_unknown_format(tmp_path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(str(tmp_path / "nope.jsonl"))
    with pytest.raises(DatasetError, match="unknown dataset format"):
        load_dataset(JSONL, "csv")


def test_auto_detects_json_array_as_sharegpt(tmp_path) -> None:
    p = tmp_path / "data.txt"
    p.write_text(json.dumps([{"conversations": [{"from": "human", "value": "hello there"}]}]))
    assert load_dataset(str(p))[0].user_turns == ["hello there"]
