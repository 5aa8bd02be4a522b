"""Each random word's token count, learnt once per tokenizer, so an exact-length prompt costs one tokenization.

A worker spent most of its CPU on exact-length prompts (`--tokenizer`): fitting one took 6-8 tokenizations, one
of them twice the prompt's length. Tokenizers split text at whitespace before they merge (BPE, SentencePiece and
WordPiece alike), so a text of words joined by single spaces has the sum of its words' counts: the first word
alone, each later word after a space. The sum picks the cut; one count of the finished text checks it, and a
text whose count is not the sum goes back to counting (the caller's slow path), so a prompt's length stays
exact whatever the tokenizer does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

__all__ = ["WordCosts", "word_costs"]

_ANCHOR = (
    "the"  # a one-token word in every vocabulary we know: a word's cost after a space is measured behind it
)
_PAD = "a"  # the pad word of ExactPrompts.fit


class WordCosts:
    """Token counts of words at a text's start and after a space, for one counter, learnt as words appear."""

    def __init__(self, count: Callable[[str], int]) -> None:
        self._count = count
        self._first: dict[str, int] = {}
        self._later: dict[str, int] = {}
        self._anchor = count(_ANCHOR)
        self.checked = 0  # finished texts counted
        self.missed = 0  # ... whose count was not their words' sum

    def later(self, word: str) -> int:
        """Tokens `word` adds after a space."""
        n = self._later.get(word)
        if n is None:
            n = self._later[word] = self._count(f"{_ANCHOR} {word}") - self._anchor
        return n

    def first(self, word: str) -> int:
        """Tokens `word` has at the start of a text."""
        n = self._first.get(word)
        if n is None:
            n = self._first[word] = self._count(word)
        return n

    def cut(self, words: Sequence[str], tokens: int) -> tuple[int, int] | None:
        """The most leading words whose summed count is <= `tokens`, with that sum; None when not even the first
        word fits, or a word counts 0 tokens (the sum would mean nothing). Only the words up to the cut are
        learnt."""
        total = k = 0
        for k, w in enumerate(words):
            n = self.first(w) if k == 0 else self.later(w)
            if n < 1:
                return None
            if total + n > tokens:
                break
            total += n
        else:
            k = len(words)
        return None if k == 0 else (k, total)

    def check(self, text: str, expected: int) -> bool:
        """Whether `text` has `expected` tokens (one tokenization), kept in the table's tally."""
        self.checked += 1
        ok = self._count(text) == expected
        self.missed += not ok
        return ok

    @property
    def additive(self) -> bool:
        """False once texts have missed their sums more than rarely: each miss costs a wasted tokenization."""
        return self.missed < 3 or self.missed * 10 <= self.checked

    def pad_cost(self) -> int:
        """Tokens one pad word adds after a space."""
        return self.later(_PAD)


_TABLES: dict[
    int, tuple[Callable[[str], int], WordCosts]
] = {}  # id -> (the counter, held so the id stays its)
_MAX_TABLES = 16  # counters live for the process (load_tokenizer is cached); tests make many
_LOCK = threading.Lock()  # prompts are built on threads (prompt_ahead.py): one table per counter


def word_costs(count: Callable[[str], int]) -> WordCosts:
    """The shared table of `count` (one per counter and process)."""
    held = _TABLES.get(id(count))
    if held is not None and held[0] is count:
        return held[1]
    with _LOCK:
        held = _TABLES.get(id(count))
        if held is None or held[0] is not count:
            if len(_TABLES) >= _MAX_TABLES:
                _TABLES.clear()
            held = _TABLES[id(count)] = (count, WordCosts(count))
        return held[1]
