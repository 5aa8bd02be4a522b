"""Deterministic word tokenizer of the simulator.

Rules (clients may calibrate against them through POST /tokenize):
- a text's token count is the number of ``\\S+`` matches in it (with ``--chars-per-token N``, each match
  is ceil(len/N) tokens);
- a chat prompt is, per message, ``CHAT_TOKENS_PER_MESSAGE`` template tokens (start, role, end,
  newline) plus the tokens of its content, and ``CHAT_TOKENS_BASE`` more for the generation prompt;
- output tokens are words of ``VOCAB``, each emitted as ``" word"``.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence
from typing import Any

CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_BASE = 3

_WORD = re.compile(r"\S+")
# ids below 100 are reserved for the chat template; words hash into [100, VOCAB_SIZE)
VOCAB_SIZE = 32000
_ROLE_IDS = {"system": 10, "user": 11, "assistant": 12, "tool": 13, "developer": 14}
_MSG_START, _MSG_END, _NEWLINE, _GEN_PROMPT = 1, 2, 3, 4

VOCAB: tuple[str, ...] = tuple(
    """the of and to in is was that for on as with by he at from his an were are which this be or
    has had not first one their its new after who they two her she been other when there all during
    into school time may years more most only over city some world would where later up such used many
    can state about national out known university united then made system under river team while
    model token stream batch cache prefix engine decode latency memory request server client value
    light water stone green north south east west early small large great public local music field
    market paper story night voice group power point house plant order level price heart""".split()
)
VOCAB_PIECES: tuple[str, ...] = tuple(" " + w for w in VOCAB)


def _word_id(word: str) -> int:
    """Map a word to a stable id (crc32, so ids agree across processes and runs)."""
    return 100 + zlib.crc32(word.encode("utf-8", "surrogatepass")) % (VOCAB_SIZE - 100)


_split = {"chars": 0}  # chars per token: 0 = a word is one token (set once per server process by configure)


def configure(chars_per_token: int) -> None:
    """0: every word is one token; N: a word is ceil(len/N) tokens, like a vocabulary that splits rare words."""
    _split["chars"] = max(0, int(chars_per_token))


def count_text(text: str) -> int:
    """Number of tokens of a text: its ``\\S+`` matches (each split in pieces of N chars when configured)."""
    n = _split["chars"]
    if not n:
        return sum(1 for _ in _WORD.finditer(text))
    return sum(-(-len(m.group()) // n) for m in _WORD.finditer(text))


def encode_text(text: str) -> list[int]:
    """Token ids of a text."""
    n = _split["chars"]
    if not n:
        return [_word_id(m.group()) for m in _WORD.finditer(text)]
    return [_word_id(w[i : i + n]) for w in _WORD.findall(text) for i in range(0, len(w), n)]


def message_text(content: Any) -> str:
    """Plain text of a chat message content (a string or a list of OpenAI content parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return " ".join(parts)
    return str(content)


def encode_chat(messages: Sequence[dict[str, Any]]) -> list[int]:
    """Token ids of a chat prompt, template tokens included."""
    ids: list[int] = []
    for msg in messages:
        ids.append(_MSG_START)
        ids.append(_ROLE_IDS.get(str(msg.get("role")), 15))
        ids.extend(encode_text(message_text(msg.get("content"))))
        ids.append(_MSG_END)
        ids.append(_NEWLINE)
    ids.extend((_MSG_START, _ROLE_IDS["assistant"], _GEN_PROMPT))
    return ids


def count_chat(messages: Sequence[dict[str, Any]]) -> int:
    """Number of tokens of a chat prompt (same as ``len(encode_chat(messages))``)."""
    total = CHAT_TOKENS_BASE
    for msg in messages:
        total += CHAT_TOKENS_PER_MESSAGE + count_text(message_text(msg.get("content")))
    return total


def sample_words(rng: random.Random, n: int) -> list[str]:
    """``n`` output pieces (``" word"``), deterministic for a given RNG state."""
    return rng.choices(VOCAB_PIECES, k=n)


def split_pieces(text: str) -> list[str]:
    """Split a text (e.g. JSON) into token-sized pieces whose concatenation is the text."""
    return re.findall(r"\w{1,6}|\W{1,3}", text)
