"""Random prompts at (near-)exact token lengths, deterministic per (seed, request index)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "ta",
    "vo",
    "shi",
    "pa",
    "du",
    "el",
    "or",
    "in",
    "be",
    "sa",
    "tu",
    "gri",
    "fen",
    "mar",
    "cel",
    "no",
    "qui",
    "ra",
    "zen",
    "po",
    "lu",
    "dan",
    "ve",
    "sto",
    "ni",
    "ham",
]


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


# Words that are one token after a space in every BPE/SentencePiece vocabulary we know; they finish a prompt at
# the exact count when the random words overshoot.
_COMMON = (
    "a I the of to and in is it you that he was for on are as with they at be this have from or one had by"
    " but not what all were we when your can said there an each which she do how if will up other about out"
    " many then them these so some her would make like him into time has look two more go see no way could"
).split()
_CALIBRATION_WORDS = tuple(VOCAB[::48]) + tuple(_COMMON)
_FIRST_WORDS = tuple(_COMMON[:8])
_PLAIN_WORDS = 400  # the ratio's sample text
TABLE_PROBES = (
    len(_FIRST_WORDS) + len(_CALIBRATION_WORDS) + 3
)  # the word table's counts, its three checks included
# A sane tokenizer gives our random words between these many tokens each (BPE ~1-3, a character-level one ~7):
# a calibration outside them is rejected, and no model turns a token count into more or fewer words than they allow
MIN_TOKENS_PER_WORD, MAX_TOKENS_PER_WORD = 0.25, 10.0


class LengthModel:
    """Turns a wanted token count into prompt text. `--input-len` counts the prompt text's tokens, as
    `vllm bench serve`, GuideLLM and AIPerf do; a chat template adds its own tokens on the server.

    Calibrated once against how the server counts: its /tokenize (vLLM's and SGLang's shape, or llama.cpp's),
    else usage.prompt_tokens of probe requests (max_tokens=1), which every OpenAI server returns. It learns
    each calibration word's token count, alone (`first`) and after a space (`after_space`). Pre-tokenizers
    split at spaces, so a text's count is the sum over its words; that is checked on sample texts, and when it
    holds prompts come out at the exact count. Otherwise a words-to-tokens ratio is used; the result compares
    requested and actual prompt tokens either way, and says so loudly when they are more than 10 % apart.
    """

    def __init__(
        self,
        tokens_per_word: float = 1.0,
        first: dict[str, int] | None = None,
        after_space: dict[str, int] | None = None,
        source: str = "none",
        warning: str | None = None,
    ) -> None:
        self.source = source  # how it was calibrated: tokenize:vllm, tokenize:llama.cpp, usage, ... (results)
        self.overhead: int | None = None  # tokens the server adds around a prompt (BOS, template), when known
        self.warning = warning  # a calibration rejected or cut short: said in the summary and the result
        self.probes: dict[str, Any] = {}  # what calibrating cost (calibration.Budget.report) and where it ran
        self.tokens_per_word = tokens_per_word
        self.first = first or {}
        self.after_space = after_space or {}
        self._words = sorted(self.after_space, key=lambda w: (self.after_space[w], w))
        self._ones = [w for w in self._words if self.after_space[w] == 1]
        self._firsts = sorted(self.first, key=lambda w: (self.first[w], w))  # shortest first

    @property
    def exact(self) -> bool:
        """Whether text() hits token counts exactly (a word table with one-token words)."""
        return bool(self.first) and bool(self._ones)

    def words_for(self, tokens: int) -> int:
        """Words of random text that give about `tokens` tokens (the ratio model), within the sane bounds of
        tokens per word: a ratio from a server that miscounts never makes a 32-token prompt 12,800 words."""
        ratio = min(max(self.tokens_per_word, MIN_TOKENS_PER_WORD), MAX_TOKENS_PER_WORD)
        return max(1, round(tokens / ratio))

    def text(self, tokens: int, rng: random.Random) -> str:
        """Random text of exactly `tokens` tokens when calibrated exactly (and `tokens` is at least the
        shortest first word), else of about that many."""
        if not self.exact:
            return random_words(self.words_for(tokens), rng)
        fits = [w for w in self._firsts if self.first[w] <= tokens] or self._firsts[:1]
        out = [rng.choice(fits)]
        left = tokens - self.first[out[0]]
        while left > 0:
            # random words while they fit; the common one-token words close the gap
            w = rng.choice(self._words)
            if self.after_space[w] > left:
                w = rng.choice(self._ones)
            out.append(w)
            left -= self.after_space[w]
        return " ".join(out)

    def to_table(self) -> dict[str, Any]:
        """The calibration as JSON-able data (the preflight hands it to the workers): `from_table` reads it."""
        return {
            "source": self.source,
            "tokens_per_word": self.tokens_per_word,
            "first": self.first,
            "after_space": self.after_space,
            "overhead": self.overhead,
            "warning": self.warning,
            "probes": self.probes,
        }

    @classmethod
    def from_table(cls, doc: dict[str, Any]) -> LengthModel:
        """A LengthModel from `to_table`'s data (ValueError when it is not such data)."""
        try:
            first = {str(w): int(n) for w, n in (doc.get("first") or {}).items()}
            after = {str(w): int(n) for w, n in (doc.get("after_space") or {}).items()}
            ratio = float(doc.get("tokens_per_word", 1.0))
            overhead = doc.get("overhead")
            lm = cls(ratio, first, after, str(doc.get("source", "none")), doc.get("warning") or None)
        except (AttributeError, TypeError, ValueError) as e:
            raise ValueError(f"not a prompt-length table: {e}") from None
        if not math.isfinite(ratio) or ratio <= 0 or any(n < 1 for n in (*first.values(), *after.values())):
            raise ValueError("not a prompt-length table: counts must be positive")
        lm.overhead = int(overhead) if isinstance(overhead, int) else None
        lm.probes = dict(doc.get("probes") or {})
        return lm

    def summary(self) -> dict[str, Any]:
        """How prompt lengths were calibrated, as the run's metadata keeps it (`prompt_calibration`)."""
        out: dict[str, Any] = {
            "source": self.source,
            "exact": self.exact,
            "overhead_tokens": self.overhead,
            "tokens_per_word": round(self.tokens_per_word, 4),
            **self.probes,
        }
        if self.warning:
            out["warning"] = self.warning
        return out

    @classmethod
    def calibrate(
        cls,
        tokenize: Callable[[dict[str, Any]], int | None],
        model: str,
        map_: Callable[[Callable[[str], int | None], Iterable[str]], Iterable[int | None]] = map,
    ) -> LengthModel:
        """Calibrate through vLLM's (and SGLang's) /tokenize body, `tokenize(body) -> count`."""
        return cls.from_counter(lambda text: tokenize(vllm_tokenize_body(model, text)), map_)

    @classmethod
    def from_counter(
        cls,
        count: Callable[[str], int | None],
        map_: Callable[[Callable[[str], int | None], Iterable[str]], Iterable[int | None]] = map,
        source: str = "tokenize",
        affords: Callable[[int], bool] | None = None,
    ) -> LengthModel:
        """Learn how the server counts our words from `count(text) -> tokens of the text alone` (a /tokenize
        shape, or usage.prompt_tokens probes less the server's own tokens). The ~170 word counts go through
        `map_` (a pool's ordered map: round trips overlap); `affords(n)` says whether n more counts fit the
        calibration's bounds (else the ratio is all it learns). A server whose count does not grow with the
        text is not believed: words then (one token each), with a warning."""
        firsts = [n for n in map_(count, _FIRST_WORDS) if n is not None and n >= 1]
        plain = count(random_words(_PLAIN_WORDS, random.Random(7)))
        if not plain:
            return cls()
        ratio = plain / _PLAIN_WORDS
        why = _not_growing(source, plain, firsts[0] if firsts else None)
        if why is not None:
            return cls(
                source=f"words (rejected: {why})",
                warning=(
                    f"PROMPT-LENGTH CALIBRATION REJECTED: {why}; prompts are sized in words (one token a word)"
                ),
            )
        if affords is not None and not affords(TABLE_PROBES - len(_FIRST_WORDS)):
            return cls(
                tokens_per_word=ratio, source=source + " (ratio)"
            )  # the word table does not fit the bounds
        pairs = [
            n for n in map_(count, [f"{_FIRST_WORDS[0]} {w}" for w in _CALIBRATION_WORDS]) if n is not None
        ]
        if len(firsts) < len(_FIRST_WORDS) or len(pairs) < len(_CALIBRATION_WORDS) or min(pairs) <= firsts[0]:
            return cls(
                tokens_per_word=ratio, source=source + " (ratio)"
            )  # a failed count, or a word adding none
        first = dict(zip(_FIRST_WORDS, firsts, strict=True))
        after = {w: n - firsts[0] for w, n in zip(_CALIBRATION_WORDS, pairs, strict=True)}
        model_ = cls(tokens_per_word=ratio, first=first, after_space=after, source=source)
        shortest = min(first.values())  # below it no text is exact (a 1-token prompt, say): not checked
        for k in (shortest, shortest + 16, shortest + 99):  # is a text's count the sum of its words' counts?
            text = model_.text(k, random.Random(k))
            if count(text) != k:
                return cls(tokens_per_word=ratio, source=source + " (ratio)")
        return model_


def _not_growing(source: str, plain: int, one: int | None) -> str | None:
    """Why a server's count of our sample text is not to be believed (None: it is): a count that does not grow
    with the text (usage.prompt_tokens always 32: 400 words one token), or a ratio no tokenizer gives."""
    grew = plain - (one or 0)
    if one is not None and grew < (_PLAIN_WORDS - 1) * MIN_TOKENS_PER_WORD:
        return (
            f"{source}: {_PLAIN_WORDS} words count {plain} token(s), one word {one}: the count does not grow "
            "with the prompt"
        )
    ratio = plain / _PLAIN_WORDS
    if not MIN_TOKENS_PER_WORD <= ratio <= MAX_TOKENS_PER_WORD:
        return (
            f"{source}: {ratio:.4g} tokens per word, outside the sane {MIN_TOKENS_PER_WORD:g}-"
            f"{MAX_TOKENS_PER_WORD:g}"
        )
    return None


def vllm_tokenize_body(model: str, text: str) -> dict[str, Any]:
    """vLLM's /tokenize request for a text's own tokens; SGLang's /tokenize takes the same (and answers
    `{"tokens", "count", "max_model_len"}` like vLLM: sglang/srt/entrypoints/openai/protocol.py)."""
    return {"model": model, "prompt": text, "add_special_tokens": False}


def llamacpp_tokenize_body(_model: str, text: str) -> dict[str, Any]:
    """llama.cpp's (llama-server's) /tokenize request: `{"content"}`, answered `{"tokens": [...]}`."""
    return {"content": text, "add_special": False}


TOKENIZE_SHAPES: tuple[tuple[str, Callable[[str, str], dict[str, Any]]], ...] = (
    ("vllm", vllm_tokenize_body),  # vLLM, SGLang, the simulator
    ("llama.cpp", llamacpp_tokenize_body),
)


def probe_counter(
    prompt_tokens: Callable[[str], int | None],
    map_: Callable[[Callable[[str], int | None], Iterable[str]], Iterable[int | None]] = map,
) -> tuple[Callable[[str], int | None], int] | None:
    """A text-token counter from usage.prompt_tokens of probe requests (what every OpenAI server returns),
    and the server's own tokens around a prompt (BOS, chat template). Those are found as the least count
    of the first words less one: each of them ("a", "the", "of", ...) is one token in every BPE and
    SentencePiece vocabulary we know. None when the server gives no usage."""
    counts = list(map_(prompt_tokens, _FIRST_WORDS[:4]))
    if any(c is None for c in counts):
        return None
    overhead = min(c for c in counts if c is not None) - 1
    if overhead < 0:
        return None

    def count(text: str) -> int | None:
        n = prompt_tokens(text)
        return None if n is None else n - overhead

    return count, overhead


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
        text = self.lengths.text(n_in, rng)
        if self.chat:
            return Prompt([{"role": "user", "content": text}], None, n_in, n_out)
        return Prompt(None, text, n_in, n_out)


def tokenize_count(raw: bytes) -> int | None:
    """Token count from a /tokenize answer body (vLLM, SGLang: {"count": N, "tokens": [...]}; llama.cpp:
    {"tokens": [...]})."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    if isinstance(doc, dict):
        count = doc.get("count")
        if isinstance(count, int):
            return count
        if isinstance(doc.get("tokens"), list):
            return len(doc["tokens"])
    return None
