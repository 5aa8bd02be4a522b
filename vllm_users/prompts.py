"""Random prompts at (near-)exact token lengths, deterministic per (seed, request index)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_SYLLABLES = [
    "ka", "lo", "mi", "ren", "ta", "vo", "shi", "pa", "du", "el", "or", "in", "be", "sa", "tu", "gri",
    "fen", "mar", "cel", "no", "qui", "ra", "zen", "po", "lu", "dan", "ve", "sto", "ni", "ham",
]  # fmt: skip


def _vocabulary(size: int = 4096) -> list[str]:
    rng = random.Random(1234)
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))))
    return sorted(words)


VOCAB = _vocabulary()


@dataclass(slots=True)
class Prompt:
    """One request's input: chat messages or a completion prompt, and the lengths asked for."""

    messages: list[dict[str, Any]] | None
    text: str | None
    input_len: int
    output_len: int


def sample_len(mean: int, range_ratio: float, rng: random.Random) -> int:
    """A length uniform in [mean*(1-r), mean*(1+r)] (vLLM's --range-ratio), at least 1."""
    if range_ratio <= 0:
        return max(1, mean)
    lo, hi = int(mean * (1 - range_ratio)), int(mean * (1 + range_ratio))
    return max(1, rng.randint(lo, hi))


def random_words(n: int, rng: random.Random) -> str:
    """n random vocabulary words separated by spaces."""
    return " ".join(rng.choices(VOCAB, k=n))


class LengthModel:
    """Maps a wanted token count to a word count: tokens = overhead + ratio * words.

    Calibrated against the server's /tokenize when it has one (the simulator does, vLLM does);
    otherwise one word = one token and the result shows requested versus actual prompt tokens.
    """

    def __init__(self, chat_overhead: int = 0, tokens_per_word: float = 1.0, exact: bool = False) -> None:
        self.chat_overhead = chat_overhead
        self.tokens_per_word = tokens_per_word
        self.exact = exact

    def words_for(self, tokens: int, chat: bool) -> int:
        """Words of random text that give about `tokens` prompt tokens."""
        body = tokens - (self.chat_overhead if chat else 0)
        return max(1, round(body / self.tokens_per_word))

    @classmethod
    def calibrate(cls, tokenize: Callable[[dict[str, Any]], int | None], model: str) -> LengthModel:
        """Ask /tokenize (via `tokenize(body) -> count`) how the server counts our words."""
        rng = random.Random(7)
        text = random_words(400, rng)
        plain = tokenize({"model": model, "prompt": text, "add_special_tokens": False})
        if not plain:
            return cls()
        ratio = plain / 400
        chat = tokenize({"model": model, "messages": [{"role": "user", "content": text}]})
        overhead = round(chat - plain) if chat else 0
        return cls(chat_overhead=max(0, overhead), tokens_per_word=ratio, exact=abs(ratio - 1.0) < 1e-9)


class RandomPrompts:
    """vLLM bench's random dataset, in words: request i gets a prompt derived from (seed, i)."""

    def __init__(
        self,
        input_len: int,
        output_len: int,
        range_ratio: float = 0.0,
        seed: int = 0,
        chat: bool = True,
        lengths: LengthModel | None = None,
    ) -> None:
        self.input_len, self.output_len, self.range_ratio = input_len, output_len, range_ratio
        self.seed, self.chat = seed, chat
        self.lengths = lengths or LengthModel()

    def get(self, index: int) -> Prompt:
        """The prompt of global request `index` (same seed -> same prompts)."""
        rng = random.Random(self.seed * 1_000_003 + index)
        n_in = sample_len(self.input_len, self.range_ratio, rng)
        n_out = sample_len(self.output_len, self.range_ratio, rng)
        text = random_words(self.lengths.words_for(n_in, self.chat), rng)
        if self.chat:
            return Prompt([{"role": "user", "content": text}], None, n_in, n_out)
        return Prompt(None, text, n_in, n_out)


def tokenize_count(raw: bytes) -> int | None:
    """Token count from a /tokenize answer body (vLLM: {"count": N, "tokens": [...]})."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if isinstance(doc, dict):
        if isinstance(doc.get("count"), int):
            return doc["count"]
        if isinstance(doc.get("tokens"), list):
            return len(doc["tokens"])
    return None
