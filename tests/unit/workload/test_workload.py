"""Prompt sources: exact lengths with a local tokenizer, clear errors without one, prefixes before prompts."""

from __future__ import annotations

import sys

import pytest

from vllm_users.options import build, changed
from vllm_users.workload.prompts import LengthModel, RandomPrompts
from vllm_users.workload.source import (
    ExactPrompts,
    PrefixedPrompts,
    TokenizerError,
    load_tokenizer,
    prompt_source,
)


def _tokenizer_file(tmp_path) -> str:
    tk = pytest.importorskip("tokenizers")
    t = tk.Tokenizer(tk.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    # words split into pieces of up to 3 characters: tokens per word vary (1..3)
    t.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [tk.pre_tokenizers.WhitespaceSplit(), tk.pre_tokenizers.Split(tk.Regex(".{1,3}"), "isolated")]
    )
    path = tmp_path / "tokenizer.json"
    t.save(str(path))
    return str(tmp_path)


def test_exact_prompts_hit_every_length(tmp_path) -> None:
    count = load_tokenizer(_tokenizer_file(tmp_path))
    assert count("abcdef gh") == 3
    src = ExactPrompts(count, 100, 16, 0.5, 3, False, LengthModel())
    for i in range(30):
        p = src.get(i)
        assert count(p.text) == p.input_len
    assert src.get(7) == ExactPrompts(count, 100, 16, 0.5, 3, False, LengthModel()).get(7)
    # --input-len counts the message text (vllm bench serve's definition); the chat template comes on top
    chat = ExactPrompts(count, 50, 16, 0.0, 0, True, LengthModel()).get(0)
    assert count(chat.messages[0]["content"]) == 50  # type: ignore[index]


def test_tokenizer_errors(tmp_path, monkeypatch) -> None:
    with pytest.raises(TokenizerError, match="no such file"):
        load_tokenizer(str(tmp_path / "nope"))
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(TokenizerError, match=r"pip install 'vllm-locust\[tokenizers\]'"):
        load_tokenizer(str(tmp_path))


def test_prompt_source_picks_dataset_and_prefix() -> None:
    o = build(
        endpoint="chat",
        dataset="tests/data/prompts_sample.jsonl",
        dataset_format="auto",
        tokenizer="",
        input_len=32,
        output_len=8,
        range_ratio=0.0,
        seed=1,
        prefix_len=16,
        cache_rate=1.0,
        num_prefixes=1,
    )
    src = prompt_source(o, LengthModel())
    assert isinstance(src, PrefixedPrompts)
    p = src.get(0)
    assert p.messages[0]["role"] == "system" and len(p.messages[0]["content"].split()) == 16  # type: ignore[index]
    assert src.get(0).messages[0] == src.get(1).messages[0]  # type: ignore[index]
    o = changed(o, dataset="", prefix_len=0)
    assert isinstance(prompt_source(o, LengthModel()), RandomPrompts)


def test_exact_prompts_fit_like_a_binary_search_with_fewer_tokenizations(tmp_path, monkeypatch) -> None:
    """The counting fit (the path for a tokenizer whose counts do not add up over words) steps from an estimate:
    the same text the binary search over word counts picks, in far fewer tokenizations (each blocks a worker's
    loop for milliseconds at real prompt lengths)."""
    import random as _random

    monkeypatch.setattr(ExactPrompts, "_fit_by_word_costs", lambda self, words, tokens: None)

    from vllm_users.workload.prompts import random_words

    count = load_tokenizer(_tokenizer_file(tmp_path))
    calls = [0]

    def counted(text: str) -> int:
        calls[0] += 1
        return count(text)

    def binary_fit(tokens: int, rng: _random.Random) -> str:  # the previous implementation, for reference
        words = random_words(max(4, tokens * 2), rng).split(" ")
        lo, hi = 1, len(words)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(" ".join(words[:mid])) <= tokens:
                lo = mid
            else:
                hi = mid - 1
        text = " ".join(words[:lo])
        for _ in range(8):
            have = count(text)
            if have >= tokens:
                break
            text += " a" * (tokens - have)
        while count(text) > tokens and " " in text:
            text = text.rsplit(" ", 1)[0]
        return text

    src = ExactPrompts(counted, 100, 16, 0.0, 0, False, LengthModel())
    for tokens in (1, 2, 7, 64, 128, 500, 1024):
        for seed in range(5):
            calls[0] = 0
            got = src.fit(tokens, _random.Random(seed))
            assert got == binary_fit(tokens, _random.Random(seed)), (tokens, seed)
            if tokens >= 7:  # below a word's length a cut can leave one multi-token word, as before
                assert count(got) == tokens
            if tokens >= 64:
                assert calls[0] <= 8, (tokens, seed, calls[0])  # the binary search took 11-14
