"""LengthModel: calibration against /tokenize and exact prompt lengths (without a local tokenizer)."""

from __future__ import annotations

import random
from typing import Any

from vllm_users.workload.prompts import LengthModel, RandomPrompts


def _bpe_like(text: str) -> int:
    """A whitespace-split tokenizer like ByteLevel BPE: a word's pieces depend on its length and on whether a
    space precedes it (the first word of a text has none, so it may split differently)."""
    words = text.split(" ")
    return sum((len(w) + (2 if i == 0 else 0)) // 3 + 1 for i, w in enumerate(words) if w)


def _server(count, calls: list[dict[str, Any]] | None = None):
    def tokenize(body: dict[str, Any]) -> int | None:
        if calls is not None:
            calls.append(body)
        assert body["add_special_tokens"] is False and body["model"] == "m"
        return count(body["prompt"])

    return tokenize


def test_calibrated_prompts_have_exact_token_counts() -> None:
    calls: list[dict[str, Any]] = []
    lm = LengthModel.calibrate(_server(_bpe_like, calls), "m")
    assert lm.exact
    assert len(calls) < 200  # one call per calibration word, not per prompt
    rng = random.Random(3)
    for n in [2, 3, 7, 31, 128, 129, 512, 2000] + [rng.randint(1, 3000) for _ in range(50)]:
        text = lm.text(n, rng)
        assert _bpe_like(text) == n, (n, text[:80])
    # the words are mixed, not one word repeated: distinct prompts, no accidental prefix-cache hits
    a, b = lm.text(128, random.Random(1)), lm.text(128, random.Random(2))
    assert a != b and len(set(a.split())) > 20


def test_random_prompts_use_the_text_count_as_input_len() -> None:
    lm = LengthModel.calibrate(_server(_bpe_like), "m")
    src = RandomPrompts(128, 16, 0.25, 5, True, lm)
    for i in range(20):
        p = src.get(i)
        assert _bpe_like(p.messages[0]["content"]) == p.input_len  # type: ignore[index]
    assert src.get(4) == RandomPrompts(128, 16, 0.25, 5, True, lm).get(4)


def test_non_additive_tokenizer_falls_back_to_the_ratio() -> None:
    def merging(text: str) -> int:  # pieces of 4 characters across spaces: counts are not sums of words
        return (len(text) + 3) // 4

    lm = LengthModel.calibrate(_server(merging), "m")
    assert not lm.exact
    assert lm.tokens_per_word > 1.0
    words = lm.text(100, random.Random(0)).split(" ")
    assert len(words) == lm.words_for(100)


def test_no_tokenize_endpoint_means_one_word_per_token() -> None:
    lm = LengthModel.calibrate(lambda body: None, "m")
    assert not lm.exact and lm.tokens_per_word == 1.0
    assert len(lm.text(40, random.Random(0)).split(" ")) == 40


def test_word_counts_go_through_the_given_map_in_order() -> None:
    """The worker overlaps the ~170 /tokenize round trips with a gevent pool's ordered imap."""
    import gevent.pool

    seen: list[str] = []

    def recording_imap(f, texts):  # type: ignore[no-untyped-def]
        texts = list(texts)
        seen.extend(texts)
        return gevent.pool.Pool(8).imap(f, texts)

    lm = LengthModel.calibrate(_server(_bpe_like), "m", recording_imap)
    assert lm.exact and len(seen) > 150
    assert lm.after_space == LengthModel.calibrate(_server(_bpe_like), "m").after_space
    rng = random.Random(9)
    assert all(_bpe_like(lm.text(n, rng)) == n for n in (5, 64, 300))
