"""Prompt-length calibration against servers that speak vLLM's /tokenize, llama.cpp's, or none at all
(usage.prompt_tokens of probe requests), each with a BPE-like tokenizer that splits our words."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from vllm_users.workload.calibration import calibrate_lengths

BOS = 1
TEMPLATE = 7  # a chat template's tokens around one user message


def _bpe_like(text: str) -> int:
    """Words split in pieces of 3 characters; a long first word (no space before it) one piece more. Short
    common words ("a", "the", "of") are one token wherever they stand, as in real BPE/SentencePiece."""
    words = [w for w in text.split(" ") if w]
    return sum(-(-len(w) // 3) + (1 if i == 0 and len(w) > 3 else 0) for i, w in enumerate(words))


class FakeServer:
    """POST handler of a server with tokenizer `_bpe_like`, a BOS and a chat template."""

    def __init__(self, tokenize: str) -> None:
        self.tokenize = tokenize  # vllm | llama.cpp | none
        self.generations = 0

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes] | None:
        if path == "/tokenize":
            if self.tokenize == "vllm" and "prompt" in body:
                n = _bpe_like(body["prompt"]) + (BOS if body.get("add_special_tokens", True) else 0)
            elif self.tokenize == "vllm" and "messages" in body:
                n = BOS + TEMPLATE + _bpe_like(body["messages"][0]["content"])
            elif self.tokenize == "llama.cpp" and "content" in body:
                n = _bpe_like(body["content"]) + (BOS if body.get("add_special") else 0)
            else:
                return (404, b'{"detail": "Not Found"}') if self.tokenize == "none" else (400, b"{}")
            return 200, json.dumps({"tokens": list(range(n))}).encode()
        if path in ("/v1/chat/completions", "/v1/completions"):
            self.generations += 1
            assert body["max_tokens"] == 1 and body["stream"] is False
            chat = path == "/v1/chat/completions"
            text = body["messages"][0]["content"] if chat else body["prompt"]
            n = BOS + (TEMPLATE if chat else 0) + _bpe_like(text)
            return 200, json.dumps(
                {"choices": [{"text": "x"}], "usage": {"prompt_tokens": n, "completion_tokens": 1}}
            ).encode()
        return None


@pytest.mark.parametrize("tokenize", ["vllm", "llama.cpp", "none"])
@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
def test_exact_lengths_from_every_source(tokenize: str, chat: bool) -> None:
    srv = FakeServer(tokenize)
    lm = calibrate_lengths(srv.post, "m", chat)
    assert lm.exact, lm.source
    assert (
        lm.source == {"vllm": "tokenize:vllm", "llama.cpp": "tokenize:llama.cpp", "none": "usage"}[tokenize]
    )
    # what the server adds around a prompt: BOS, and the template for chat
    assert lm.overhead == BOS + (TEMPLATE if chat else 0)
    for k in (5, 64, 128, 300):
        text = lm.text(k, random.Random(k))
        assert _bpe_like(text) == k  # the prompt text has exactly the asked tokens
    if tokenize == "vllm":
        assert srv.generations == 0  # /tokenize answers everything: nothing is generated
    elif tokenize == "llama.cpp":
        assert srv.generations == (1 if chat else 0)  # its chat template is measured with one probe


def test_no_tokenize_and_no_usage_falls_back_to_words() -> None:
    lm = calibrate_lengths(lambda path, body: (404, b"{}"), "m", True)
    assert not lm.exact and lm.source == "none" and lm.overhead is None
    lm = calibrate_lengths(lambda path, body: None, "m", False)
    assert not lm.exact and lm.source == "none"
