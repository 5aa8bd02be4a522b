"""Exact-length prompts from learnt word counts: the counting fit's text in one tokenization, exact on every
tokenizer (a tokenizer whose counts do not add up over words goes back to counting)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from vllm_users.workload.prompts import VOCAB, LengthModel, random_words
from vllm_users.workload.source import ExactPrompts, load_tokenizer
from vllm_users.workload.word_costs import word_costs

LENGTHS = (1, 2, 7, 64, 128, 500, 1024)


def _bpe(tmp_path, kind: str) -> Callable[[str], int]:
    """A small trained BPE: byte-level (GPT-2 / Llama 3 style) or metaspace (SentencePiece / Llama 2 style)."""
    tk = pytest.importorskip("tokenizers")
    tok = tk.Tokenizer(tk.models.BPE(unk_token="[UNK]"))
    if kind == "bytelevel":
        tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        alphabet = tk.pre_tokenizers.ByteLevel.alphabet()
    else:
        tok.pre_tokenizer = tk.pre_tokenizers.Metaspace()
        alphabet = []
    trainer = tk.trainers.BpeTrainer(vocab_size=600, special_tokens=["[UNK]"], initial_alphabet=alphabet)
    common = " ".join(["a", "the"] * 50)  # the pad and the anchor are words of every real vocabulary
    rng = random.Random(3)
    tok.train_from_iterator([random_words(200, rng) for _ in range(50)] + [common], trainer)
    path = tmp_path / kind
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    return load_tokenizer(str(path))


class _Counting(ExactPrompts):
    """ExactPrompts without the word table: the counting fit every prompt took before it."""

    def _fit_by_word_costs(self, words: list[str], tokens: int) -> str | None:
        return None


def _counting_fit(count: Callable[[str], int], tokens: int, seed: int) -> str:
    return _Counting(count, 100, 16, 0.0, 0, False, LengthModel()).fit(tokens, random.Random(seed))


@pytest.mark.parametrize("kind", ["bytelevel", "metaspace"])
def test_one_tokenization_per_prompt_same_text(tmp_path, kind: str) -> None:
    """Once the table has seen the words, a prompt costs one tokenization (the check), and its text is the
    counting fit's, with exactly the tokens asked for."""
    count = _bpe(tmp_path, kind)
    calls = [0]

    def counted(text: str) -> int:
        calls[0] += 1
        return count(text)

    table = word_costs(counted)
    for w in VOCAB:  # learn every word once (a worker does this over its first few prompts)
        table.first(w), table.later(w)
    table.pad_cost()
    src = ExactPrompts(counted, 100, 16, 0.0, 0, False, LengthModel())
    for tokens in LENGTHS:
        for seed in range(4):
            calls[0] = 0
            got = src.fit(tokens, random.Random(seed))
            used = calls[0]
            assert got == _counting_fit(count, tokens, seed), (kind, tokens, seed)
            if tokens >= 7:
                assert count(got) == tokens
                assert used == 1, (
                    kind,
                    tokens,
                    seed,
                    used,
                )  # the counting fit takes 6-8, one of 2x the length
    assert table.additive and table.missed == 0 and table.checked >= 20


def test_a_tokenizer_that_does_not_add_up_is_still_exact() -> None:
    """Counts that are not a sum over words (characters without spaces, over 3): every text comes out exact,
    each miss costs one tokenization, and after a few misses the table stops being asked."""

    def count(text: str) -> int:
        return max(1, len(text.replace(" ", "")) // 3)

    src = ExactPrompts(count, 100, 16, 0.0, 0, False, LengthModel())
    for tokens in (64, 128, 500):
        for seed in range(6):
            got = src.fit(tokens, random.Random(seed))
            assert got == _counting_fit(count, tokens, seed)
            assert count(got) == tokens
    table = word_costs(count)
    assert not table.additive and table.missed >= 3


def test_the_table_is_shared_per_counter() -> None:
    """One table per counter and process: every source of a worker (and the trace's per-request fits) learns
    into the same one."""

    def a(text: str) -> int:
        return len(text.split())

    def b(text: str) -> int:
        return len(text.split())

    assert word_costs(a) is word_costs(a) and word_costs(a) is not word_costs(b)
    assert word_costs(a).cut(["x", "y", "z"], 2) == (2, 2)
    assert word_costs(a).cut(["x"], 0) is None
