"""Where a scenario's prompts come from: random text, a dataset, a local tokenizer for exact lengths, prefixes."""

from __future__ import annotations

import functools
import importlib
import os
import random
from collections.abc import Callable
from typing import Any, Protocol

from vllm_users.errors import TokenizerError  # raised here; importable from here too
from vllm_users.workload.prefixes import PrefixOptions, SharedPrefixes, from_options
from vllm_users.workload.prompt_ahead import ahead
from vllm_users.workload.prompt_options import PromptOptions, RequestOptions
from vllm_users.workload.prompts import LengthModel, Prompt, RandomPrompts, random_words, sample_len
from vllm_users.workload.word_costs import word_costs


class PromptSource(Protocol):
    """Anything that gives the prompt of global request `index`."""

    def get(self, index: int) -> Prompt:
        """The prompt of global request `index` (the same index gives the same prompt on every worker)."""
        ...


class TokenCounter:
    """A text's token count (`count(text) -> int`); `releases_gil`: whether a call leaves the GIL to other
    threads (HF `tokenizers`' batch call does, its single `encode` does not), so a prompt can be built on a
    thread without holding a worker's event loop (vllm_users/workload/prompt_ahead.py)."""

    def __init__(self, fn: Callable[[str], int], releases_gil: bool) -> None:
        self._fn = fn
        self.releases_gil = releases_gil

    def __call__(self, text: str) -> int:
        """The token count of `text` (no special tokens)."""
        return self._fn(text)


def _rust_counter(tk: Any) -> TokenCounter:
    # encode_batch gives the same ids as encode, and leaves the GIL while it tokenizes (encode holds it)
    return TokenCounter(lambda text: len(tk.encode_batch([text], add_special_tokens=False)[0].ids), True)


@functools.cache  # once per process: every user builds its source, and a load blocks the loop 10-40 ms
def load_tokenizer(path: str) -> TokenCounter:
    """A token counter from local tokenizer files (`tokenizers`, else `transformers`); imported lazily."""
    if not os.path.exists(path):
        raise TokenizerError(f"--tokenizer {path}: no such file or directory")
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    tokenizers: Any
    try:
        tokenizers = importlib.import_module(
            "tokenizers"
        )  # optional extra; a plain import trips mypy without it
    except ImportError:
        tokenizers = None
    if tokenizers is not None and os.path.isfile(file):
        try:
            tk = tokenizers.Tokenizer.from_file(file)
        except Exception as e:  # noqa: BLE001 - any load failure is the same user mistake
            raise TokenizerError(f"--tokenizer {file}: cannot load: {str(e).splitlines()[0][:160]}") from None
        return _rust_counter(tk)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise TokenizerError(
            "--tokenizer needs the optional extra: pip install 'vllm-locust[tokenizers]'"
            + ("" if tokenizers is None else f" (or a tokenizer.json in {path})")
        ) from None
    try:
        hf = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # noqa: BLE001
        raise TokenizerError(f"--tokenizer {path}: cannot load: {str(e).splitlines()[0][:160]}") from None
    backend = getattr(hf, "backend_tokenizer", None)  # a fast tokenizer is a `tokenizers` one underneath
    if backend is not None and hasattr(backend, "encode_batch"):
        return _rust_counter(backend)
    return TokenCounter(lambda text: len(hf.encode(text, add_special_tokens=False)), False)


class ExactPrompts(RandomPrompts):
    """RandomPrompts whose text is cut to exactly the wanted token count with a local tokenizer."""

    def __init__(self, count: Callable[[str], int], *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.count = count

    def fit(self, tokens: int, rng: random.Random) -> str:
        """Random words whose tokenization has exactly `tokens` tokens (or the nearest below, then padded)."""
        words = random_words(max(4, tokens * 2), rng).split(" ")
        quick = self._fit_by_word_costs(words, tokens)
        if quick is not None:
            return quick
        lo = self._longest_within(words, tokens)
        text = " ".join(words[:lo])
        have = self.count(text)
        for _ in range(8):  # top up with short words when the cut fell inside a multi-token word
            if have >= tokens:
                break
            text += " a" * (tokens - have)
            have = self.count(text)
        while have > tokens and " " in text:
            text = text.rsplit(" ", 1)[0]
            have = self.count(text)
        return text

    def _fit_by_word_costs(self, words: list[str], tokens: int) -> str | None:
        """The text the counting fit below picks, from the words' learnt counts and one tokenization that checks
        it (word_costs.py); None where the tokenizer does not add up, or the cut needs the slow path's care."""
        table = word_costs(self.count)
        if not table.additive:
            return None
        cut = table.cut(words, tokens)
        if cut is None or (cut[1] < tokens and table.pad_cost() != 1):
            return None
        k, have = cut
        text = " ".join(words[:k]) + " a" * (tokens - have)
        return text if table.check(text, tokens) else None

    def _longest_within(self, words: list[str], tokens: int) -> int:
        """The largest word count (>= 1) whose text has <= `tokens` tokens: what a binary search over word counts
        finds, by interpolating between a count that fits and one that does not (counts grow about linearly
        with words: 2-4 tokenizations instead of log2(len) + 1, each 1-5 ms of the event loop per request)."""
        lo, c_lo, hi, c_hi = 0, 0, len(words), self.count(" ".join(words))  # 0 words fit with 0 tokens
        if c_hi <= tokens:
            return hi
        step = 0
        while hi - lo > 1:
            step += 1
            if (
                step <= 3
            ):  # interpolate where the count crosses `tokens`; then bisect, to bound the worst case
                w = lo + int((tokens + 0.5 - c_lo) * (hi - lo) / max(c_hi - c_lo, 1))
            else:
                w = (lo + hi) // 2
            w = min(hi - 1, max(lo + 1, w))
            c = self.count(" ".join(words[:w]))
            if c <= tokens:
                lo, c_lo = w, c
                if step <= 3 and w + 1 < hi:  # the estimate is usually right: check its neighbour above
                    c = self.count(" ".join(words[: w + 1]))
                    if c <= tokens:
                        lo, c_lo = w + 1, c
                    else:
                        hi, c_hi = w + 1, c
            else:
                hi, c_hi = w, c
                if step <= 3 and w - 1 > lo:  # ... or below
                    c = self.count(" ".join(words[: w - 1]))
                    if c <= tokens:
                        lo, c_lo = w - 1, c
                    else:
                        hi, c_hi = w - 1, c
        return max(lo, 1)

    def get(self, index: int) -> Prompt:
        """Prompt `index` whose text has an exact token count (a chat template adds its own on top)."""
        rng = random.Random(self.seed * 1_000_003 + index)
        n_in = sample_len(self.input_len, self.range_ratio, rng)
        n_out = sample_len(self.output_len, self.range_ratio, rng)
        text = self.fit(n_in, rng)
        if self.chat:
            return Prompt([{"role": "user", "content": text}], None, n_in, n_out)
        return Prompt(None, text, n_in, n_out)


# exact-prompt sources by their options; the counter and LengthModel of the key's ids are held (ExactPrompts
# and the tuple), so neither id can be another object's
_AHEAD: dict[tuple[Any, ...], tuple[LengthModel, PromptSource]] = {}


class PrefixedPrompts:
    """Puts a shared or unique system prompt (SharedPrefixes, keyed by request index) before each prompt."""

    def __init__(self, base: PromptSource, prefixes: SharedPrefixes) -> None:
        self.base = base
        self.prefixes = prefixes

    def get(self, index: int) -> Prompt:
        """Prompt `index` with its prefix; input_len includes --prefix-len."""
        p = self.base.get(index)
        prefix = self.prefixes.text(index) or ""
        n_in = p.input_len + self.prefixes.prefix_len
        if p.messages is not None:
            return Prompt([{"role": "system", "content": prefix}, *p.messages], None, n_in, p.output_len)
        return Prompt(None, prefix + "\n" + (p.text or ""), n_in, p.output_len)


class _Endpoint(Protocol):
    """What prompt_source reads of the scenario group: its --endpoint."""

    @property
    def endpoint(self) -> str: ...


class PromptSettings(Protocol):
    """What prompt_source reads of an Options (a Protocol: workload/ stands below vllm_users.options)."""

    @property
    def request(self) -> RequestOptions: ...

    @property
    def prompt(self) -> PromptOptions: ...

    @property
    def prefix(self) -> PrefixOptions: ...

    @property
    def scenario(self) -> _Endpoint: ...


def prompt_source(
    o: PromptSettings, lengths: LengthModel, chat: bool | None = None, reserve: int = 0
) -> PromptSource:
    """The prompt source of a scenario from --dataset, --tokenizer, --prefix-len (and lengths). `chat`
    overrides --endpoint (json/tools always chat); `reserve` tokens of --input-len are left for the
    scenario's own instruction (random and tokenizer prompts; a dataset's prompts keep their lengths)."""
    chat = o.scenario.endpoint == "chat" if chat is None else chat
    input_len = max(1, o.request.input_len - reserve)
    base: PromptSource
    if o.prompt.dataset:
        from vllm_users.workload.datasets import DatasetPrompts, load_dataset_cached

        entries = load_dataset_cached(o.prompt.dataset, o.prompt.dataset_format)
        base = DatasetPrompts(entries, o.request.output_len, o.request.seed, chat, lengths)
    elif o.prompt.tokenizer:
        count = load_tokenizer(o.prompt.tokenizer)
        key = (
            id(count),
            input_len,
            o.request.output_len,
            o.request.range_ratio,
            o.request.seed,
            chat,
            id(lengths),
        )
        if key not in _AHEAD:  # one per process: its builds ahead follow the worker's tickets, not one user's
            exact = ExactPrompts(
                count, input_len, o.request.output_len, o.request.range_ratio, o.request.seed, chat, lengths
            )
            _AHEAD[key] = (lengths, ahead(exact, getattr(count, "releases_gil", False)))
        base = _AHEAD[key][1]
    else:
        base = RandomPrompts(
            input_len, o.request.output_len, o.request.range_ratio, o.request.seed, chat, lengths
        )
    prefixes = from_options(o.prefix, o.request.seed, lengths)
    return PrefixedPrompts(base, prefixes) if prefixes.enabled else base


def with_instruction(p: Prompt, instruction: str) -> list[dict[str, Any]]:
    """The prompt's chat messages with `instruction` put before the last user message's text."""
    messages = (
        [dict(m) for m in p.messages]
        if p.messages is not None
        else [{"role": "user", "content": p.text or ""}]
    )
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=None)
    if last is None:
        messages.append({"role": "user", "content": instruction})
    else:
        messages[last]["content"] = instruction + str(messages[last].get("content") or "")
    return messages
