"""The prompt of a trace request: its own text or messages, random text at its exact length, or mooncake blocks.

- a line's `prompt` / `messages`: sent as given;
- `input_len` alone (azure, burstgpt, jsonl, records): random text of exactly that many tokens, through the run's
  length model (the server's /tokenize, as `--input-len`) or `--tokenizer`, seeded by (--seed, trace index);
- mooncake `hash_ids`: each id is a block of exactly `--trace-block-size` tokens of random text seeded by
  (--seed, id), so equal ids give equal token blocks wherever they occur; the prompt is the blocks in order, cut
  to `input_length` (the trace's last block is partial). The server then sees the trace's prefix reuse.

Exactness of a concatenation: a pre-tokenizer splits at spaces, so a text's count is its first word's count alone
plus every later word's count after a space (`LengthModel.first` / `after_space`). Each block is built from
after-space counts and begins with a word that counts the same alone, so block k counts the same at the start of
a prompt as after block k-1, and the prompt's count is the sum of its blocks'.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from vllm_users.workload.prompts import LengthModel, random_words
from vllm_users.workload.trace import TraceRequest

__all__ = ["BLOCK_CACHE", "TracePrompts"]

BLOCK_CACHE = 8192  # blocks kept per process (~12 KB each at 512 tokens): a hot shared prefix is built once


class TracePrompts:
    """Builds the prompt text of trace requests; `text(req, index)` is deterministic for a (seed, index)."""

    def __init__(
        self,
        lengths: LengthModel,
        block_size: int = 512,
        seed: int = 0,
        count: Callable[[str], int] | None = None,
    ) -> None:
        self.lengths = lengths
        self.block_size = block_size
        self.seed = seed
        self.count = count  # --tokenizer: a local counter that makes plain input_len prompts exact
        after = lengths.after_space if lengths.exact else {}
        self._words = sorted(after)
        self._ones = sorted(w for w, n in after.items() if n == 1)
        # block leads: words that count the same alone and after a space (block 0 opens the prompt)
        self._leads = sorted(w for w, n in lengths.first.items() if after.get(w) == n) if after else []
        self._blocks: OrderedDict[int, tuple[str, tuple[str, ...], tuple[int, ...]]] = OrderedDict()

    # ----- mooncake blocks -----
    def block(self, hash_id: int) -> tuple[str, tuple[str, ...], tuple[int, ...]]:
        """Hash id `hash_id`'s block: its text, words and each word's tokens after a space (0: the ratio model);
        exactly block_size tokens when the length model is exact (about that many otherwise)."""
        got = self._blocks.get(hash_id)
        if got is not None:
            self._blocks.move_to_end(hash_id)
            return got
        rng = random.Random(f"trace-block:{self.seed}:{hash_id}")
        if not self._words:  # the ratio model: about block_size tokens of words
            words = random_words(self.lengths.words_for(self.block_size), rng).split(" ")
            counts = [0] * len(words)
        else:
            after = self.lengths.after_space
            lead = rng.choice(self._leads or self._ones or self._words)
            words, counts, left = [lead], [after[lead]], self.block_size - after[lead]
            while left > 0:
                w = rng.choice(self._words)
                if after[w] > left:
                    w = rng.choice(self._ones)
                words.append(w)
                counts.append(after[w])
                left -= after[w]
        out = (" ".join(words), tuple(words), tuple(counts))
        self._blocks[hash_id] = out
        if len(self._blocks) > BLOCK_CACHE:
            self._blocks.popitem(last=False)
        return out

    def warm(self, hash_ids: Iterable[int]) -> int:
        """Build these ids' blocks now (before the schedule starts: a block built at send time is send lag);
        how many are cached. Stops at the cache's size, so the earliest ids stay."""
        for h in hash_ids:
            if len(self._blocks) >= BLOCK_CACHE:
                break
            self.block(h)
        return len(self._blocks)

    def blocks_text(self, hash_ids: tuple[int, ...], tokens: int | None, index: int) -> str:
        """The blocks of `hash_ids` in order, cut to `tokens` (None: whole blocks); tokens past the blocks are
        random text seeded by the request's index."""
        if not self._words:  # ratio model: whole blocks' words, cut by the words-per-token ratio
            words = [w for h in hash_ids for w in self.block(h)[1]]
            if tokens is not None:
                want = self.lengths.words_for(tokens)
                if len(words) < want:
                    words += random_words(
                        want - len(words), random.Random(f"trace-tail:{self.seed}:{index}")
                    ).split()
                words = words[:want]
            return " ".join(words)
        parts: list[str] = []
        left = tokens if tokens is not None else len(hash_ids) * self.block_size
        for h in hash_ids:
            if left <= 0:
                break
            text, bwords, counts = self.block(h)
            if left >= self.block_size:  # a whole block: its text as built
                parts.append(text)
                left -= self.block_size
                continue
            # the cut falls inside this block: its words while they fit (only this partial block differs from
            # the full one, at its end); random words close the gap below
            k = 0
            while k < len(bwords) and counts[k] <= left:
                left -= counts[k]
                k += 1
            if k:
                parts.append(" ".join(bwords[:k]))
            break
        if left > 0:  # the cut block's gap, or more tokens than the ids cover
            rng = random.Random(f"trace-tail:{self.seed}:{index}")
            tail: list[str] = []
            while left > 0:
                w = rng.choice(self._words) if parts or tail else rng.choice(self._leads or self._ones)
                if self.lengths.after_space[w] > left:
                    w = rng.choice(self._ones)
                tail.append(w)
                left -= self.lengths.after_space[w]
            parts.append(" ".join(tail))
        return " ".join(parts)

    # ----- one request -----
    def text(self, req: TraceRequest, index: int) -> str:
        """The prompt text of a request that gives no prompt/messages: blocks or random text of input_len."""
        n = req.input_len if req.input_len is not None else 1
        if req.hash_ids:
            return self.blocks_text(req.hash_ids, req.input_len, index)
        rng = random.Random(self.seed * 1_000_003 + index)
        if self.count is not None:
            from vllm_users.workload.source import ExactPrompts

            return ExactPrompts(self.count, n, 1, 0.0, self.seed, True, self.lengths).fit(n, rng)
        return self.lengths.text(n, rng)

    def user_content(self, req: TraceRequest, index: int) -> str:
        """The new user text of a request: the line's prompt, else text built at its length."""
        return req.prompt if req.prompt is not None else self.text(req, index)

    def messages(
        self, req: TraceRequest, index: int, history: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """Chat messages: the line's own messages as given, else the session's history and one user message."""
        if req.messages is not None:
            return [dict(m) for m in req.messages]
        return [*(history or []), {"role": "user", "content": self.user_content(req, index)}]
