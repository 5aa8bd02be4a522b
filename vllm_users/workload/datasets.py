"""Workload files: ShareGPT JSON (single- and multi-turn) and generic JSONL (`prompt` or `messages`).

Every problem is a DatasetError whose message is one line naming the file and, where there is one, the line.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import Any

from vllm_users.errors import DatasetError  # raised here; importable from here too
from vllm_users.workload.prompts import LengthModel, Prompt

FORMATS = ("auto", "sharegpt", "jsonl")
_USER = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "model"}
_ROLES = {"system", "user", "assistant", "tool"}


@dataclass(slots=True)
class DatasetEntry:
    """One usable conversation: the first prompt's messages, every user turn, length hints."""

    messages: list[dict[str, str]]  # what a single request sends (system + first user message)
    user_turns: list[str] = field(default_factory=list)  # every user message, for multi-turn
    max_tokens: int | None = None  # JSONL max_tokens
    reference_words: int | None = None  # ShareGPT: words of the first assistant reply
    line: int = 0


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _sharegpt_entry(item: Any, where: str, line: int) -> DatasetEntry | None:
    if not isinstance(item, dict) or not isinstance(item.get("conversations"), list):
        raise DatasetError(f"{where}: a ShareGPT entry needs a 'conversations' list")
    system: list[dict[str, str]] = []
    users: list[str] = []
    reference: int | None = None
    for turn in item["conversations"]:
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str) or "from" not in turn:
            raise DatasetError(f"{where}: each conversation turn needs 'from' and a string 'value'")
        who = str(turn["from"]).lower()
        if who == "system":
            system = [{"role": "system", "content": turn["value"]}]
        elif who in _USER:
            users.append(turn["value"])
        elif who in _ASSISTANT:
            if users and reference is None:
                reference = len(turn["value"].split())
        else:
            raise DatasetError(f"{where}: unknown speaker {turn['from']!r} (expected human/gpt/system)")
    if not users or not users[0].strip():
        return None  # no human prompt: skipped like vLLM bench does
    return DatasetEntry(system + [{"role": "user", "content": users[0]}], users, None, reference, line)


def _load_sharegpt(path: str, text: str) -> list[DatasetEntry]:
    dec = json.JSONDecoder()
    pos = len(text) - len(text.lstrip())
    if not text[pos : pos + 1] == "[":
        raise DatasetError(
            f"{path} line {_line_of(text, pos)}: a ShareGPT file is a JSON array of conversations"
        )
    pos += 1
    out: list[DatasetEntry] = []
    index = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if text[pos : pos + 1] == "]":
            break
        try:
            item, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path} line {e.lineno}: not valid JSON: {e.msg}") from None
        line = _line_of(text, pos)
        entry = _sharegpt_entry(item, f"{path} line {line} (entry {index})", line)
        if entry is not None:
            out.append(entry)
        index += 1
        pos = end
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if text[pos : pos + 1] == ",":
            pos += 1
        elif text[pos : pos + 1] != "]":
            raise DatasetError(
                f"{path} line {_line_of(text, pos)}: expected ',' or ']' after entry {index - 1}"
            )
    return out


def _jsonl_entry(doc: Any, where: str, line: int) -> DatasetEntry:
    if not isinstance(doc, dict):
        raise DatasetError(f"{where}: expected a JSON object with 'prompt' or 'messages'")
    mt = doc.get("max_tokens")
    if mt is not None and (isinstance(mt, bool) or not isinstance(mt, int) or mt < 1):
        raise DatasetError(f"{where}: max_tokens must be a positive integer, got {mt!r}")
    if isinstance(doc.get("prompt"), str) and doc["prompt"].strip():
        return DatasetEntry([{"role": "user", "content": doc["prompt"]}], [doc["prompt"]], mt, None, line)
    msgs = doc.get("messages")
    if isinstance(msgs, list) and msgs:
        for m in msgs:
            if (
                not isinstance(m, dict)
                or m.get("role") not in _ROLES
                or not isinstance(m.get("content"), str)
            ):
                raise DatasetError(
                    f"{where}: each message needs a role ({'/'.join(sorted(_ROLES))}) and string content"
                )
        users = [m["content"] for m in msgs if m["role"] == "user"]
        if not users:
            raise DatasetError(f"{where}: messages have no user message")
        return DatasetEntry([dict(m) for m in msgs], users, mt, None, line)
    raise DatasetError(f"{where}: needs a non-empty 'prompt' string or a 'messages' list")


def _load_jsonl(path: str, text: str) -> list[DatasetEntry]:
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise DatasetError(f"{path} line {n}: not valid JSON: {e}") from None
        out.append(_jsonl_entry(doc, f"{path} line {n}", n))
    return out


def detect_format(path: str, text: str) -> str:
    """sharegpt for a JSON array, jsonl otherwise (the extension decides when it says)."""
    if path.endswith(".jsonl"):
        return "jsonl"
    return "sharegpt" if text.lstrip()[:1] == "[" else "jsonl"


def load_dataset(path: str, fmt: str = "auto") -> list[DatasetEntry]:
    """Read and check a dataset file; DatasetError (one line, file and line) when it is unusable."""
    if fmt not in FORMATS:
        raise DatasetError(f"unknown dataset format {fmt!r} (available: {', '.join(FORMATS)})")
    if not os.path.exists(path):
        raise DatasetError(f"dataset file {path} not found")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read dataset file {path}: {e}") from None
    if not text.strip():
        raise DatasetError(f"dataset file {path} is empty")
    if fmt == "auto":
        fmt = detect_format(path, text)
    entries = _load_sharegpt(path, text) if fmt == "sharegpt" else _load_jsonl(path, text)
    if not entries:
        raise DatasetError(f"dataset file {path} has no usable prompts")
    return entries


_CACHE: dict[tuple[str, str], list[DatasetEntry]] = {}


def dataset_size(path: str, fmt: str = "auto") -> int:
    """How many usable prompts the dataset holds (the requests it can give before a prompt is sent again)."""
    return len(load_dataset_cached(path, fmt))


def load_dataset_cached(path: str, fmt: str = "auto") -> list[DatasetEntry]:
    """load_dataset once per process (every user of a worker shares the entries)."""
    key = (path, fmt)
    if key not in _CACHE:
        _CACHE[key] = load_dataset(path, fmt)
    return _CACHE[key]


class DatasetPrompts:
    """Request i gets entry perm[i % n] (perm shuffled by --seed); lengths from the entry or --output-len."""

    def __init__(
        self,
        entries: list[DatasetEntry],
        output_len: int,
        seed: int = 0,
        chat: bool = True,
        lengths: LengthModel | None = None,
    ) -> None:
        self.entries = entries
        self.output_len = output_len
        self.chat = chat
        self.lengths = lengths or LengthModel()
        self.order = list(range(len(entries)))
        random.Random(f"dataset:{seed}").shuffle(self.order)

    def get(self, index: int) -> Prompt:
        """The prompt of global request `index`."""
        e = self.entries[self.order[index % len(self.entries)]]
        out = e.max_tokens
        if out is None and e.reference_words:
            out = max(1, round(e.reference_words * self.lengths.tokens_per_word))
        out = out or self.output_len
        words = sum(len(m["content"].split()) for m in e.messages)
        n_in = max(1, round(words * self.lengths.tokens_per_word))
        if self.chat:
            return Prompt([dict(m) for m in e.messages], None, n_in, out)
        return Prompt(None, "\n".join(m["content"] for m in e.messages), n_in, out)
