"""Calibrate prompt lengths against the server under test: how does it count our words?

In order: its /tokenize in vLLM's shape (SGLang's is the same), in llama.cpp's shape, and last the one thing
every OpenAI-compatible server returns, `usage.prompt_tokens` of probe requests with `max_tokens: 1` on the
run's own endpoint. Each source also tells, where it can, how many tokens the server adds around a prompt
(BOS, chat template): the result compares the actual prompt tokens, less those, with `--input-len`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from vllm_users.workload.prompts import TOKENIZE_SHAPES, LengthModel, probe_counter, tokenize_count

# post(path, body) -> (HTTP status, body bytes), or None when the request failed
Post = Callable[[str, dict[str, Any]], "tuple[int, bytes] | None"]
Mapper = Callable[[Callable[[str], "int | None"], Iterable[str]], Iterable["int | None"]]


def _answer(post: Post, path: str, body: dict[str, Any]) -> Any:
    got = post(path, body)
    if got is None or got[0] != 200:
        return None
    try:
        return json.loads(got[1])
    except ValueError:
        return None


def _tokenize_counter(post: Post, model: str) -> tuple[str, Callable[[str], int | None]] | None:
    """The first /tokenize shape the server answers, as a counter of a text's own tokens."""
    for name, body_of in TOKENIZE_SHAPES:

        def count(text: str, body_of: Callable[[str, str], dict[str, Any]] = body_of) -> int | None:
            got = post("/tokenize", body_of(model, text))
            return tokenize_count(got[1]) if got is not None and got[0] == 200 else None

        n = count("a b")
        if n is not None and n >= 1:
            return name, count
    return None


def _usage_counter(post: Post, model: str, chat: bool) -> Callable[[str], int | None]:
    """usage.prompt_tokens of a one-token request carrying `text` on the run's endpoint."""
    path = "/v1/chat/completions" if chat else "/v1/completions"

    def prompt_tokens(text: str) -> int | None:
        body: dict[str, Any] = {"model": model, "max_tokens": 1, "stream": False}
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        doc = _answer(post, path, body)
        usage = doc.get("usage") if isinstance(doc, dict) else None
        n = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return n if isinstance(n, int) else None

    return prompt_tokens


def _tokenize_overhead(post: Post, model: str, shape: str, chat: bool, own: int) -> int | None:
    """Tokens a request adds around the text "a" (`own` tokens alone), by /tokenize where it can tell."""
    if shape == "vllm":
        body: dict[str, Any] = {"model": model}
        if chat:  # the chat template, as the server applies it to one user message
            body.update(messages=[{"role": "user", "content": "a"}], add_generation_prompt=True)
        else:
            body.update(prompt="a", add_special_tokens=True)
    elif not chat:  # llama.cpp: with its special tokens (BOS); its chat template is not exposed here
        body = {"content": "a", "add_special": True}
    else:
        return None
    got = post("/tokenize", body)
    n = tokenize_count(got[1]) if got is not None and got[0] == 200 else None
    return n - own if n is not None and n >= own else None


def calibrate_lengths(post: Post, model: str, chat: bool, map_: Mapper = map) -> LengthModel:
    """A LengthModel for this server (`source` says how it was calibrated, `overhead` its own tokens)."""
    found = _tokenize_counter(post, model)
    if found is not None:
        shape, count = found
        lm = LengthModel.from_counter(count, map_, source=f"tokenize:{shape}")
        own = count("a")
        if own is not None:
            lm.overhead = _tokenize_overhead(post, model, shape, chat, own)
            if lm.overhead is None:  # /tokenize cannot tell (llama.cpp's chat template): one probe request can
                probed = _usage_counter(post, model, chat)("a")
                lm.overhead = probed - own if probed is not None and probed >= own else None
        return lm
    probe = probe_counter(_usage_counter(post, model, chat))
    if probe is None:
        return LengthModel(source="none")
    count, overhead = probe
    lm = LengthModel.from_counter(count, map_, source="usage")
    lm.overhead = overhead
    return lm
