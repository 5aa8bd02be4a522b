"""Which chat and completions chunks carry output, and their finish_reason and usage, by byte search.

JSON is not parsed per chunk (docs/metrics.md): a key is found with one `find`, and its value told by the bytes
after it, whatever the whitespace a re-serializing proxy put before them (`"content": "x"`, `"usage": {`).
"""

from __future__ import annotations

__all__ = [
    "carries_text",
    "finish_reason_of",
    "finish_reason_spaced",
    "has_object",
    "is_chat_output",
    "is_completion_output",
    "is_reasoning_only",
]

_CONTENT_KEYS = (b'"content":', b'"reasoning_content":', b'"reasoning":')
_REASONING_KEYS = (b'"reasoning_content":', b'"reasoning":')


def is_chat_output(payload: bytes) -> bool:
    """True when a chat chunk carries generated output (content, reasoning or tool calls)."""
    if b'"tool_calls":[{' in payload or b'"tool_calls": [{' in payload:
        return True
    for key in _CONTENT_KEYS:
        j = payload.find(key)
        if j < 0:
            continue
        k = j + len(key)
        while k < len(payload) and payload[k] == 32:  # tolerate `"content": "x"`
            k += 1
        if k >= len(payload) or payload[k] != 34:  # null or absent
            continue
        if payload[k + 1 : k + 2] != b'"':
            return True
        # empty string: the role chunk does not count, an empty non-role delta does (vLLM bench's rule)
        if key == b'"content":' and b'"role"' not in payload:
            return True
    return False


def _has_text(payload: bytes, key: bytes) -> bool:
    """True when `key` is followed by a non-empty JSON string (not null, not "")."""
    j = payload.find(key)
    if j < 0:
        return False
    k = j + len(key)
    while k < len(payload) and payload[k] == 32:
        k += 1
    return payload[k : k + 1] == b'"' and payload[k + 1 : k + 2] != b'"'


def is_reasoning_only(payload: bytes) -> bool:
    """True when an output chat chunk carries reasoning (`reasoning_content` or `reasoning`) and no answer.

    Byte search, like is_chat_output; the reader asks only until the first answer chunk (once per request
    for a model that does not reason)."""
    if b'"reasoning' not in payload:
        return False
    if not (_has_text(payload, _REASONING_KEYS[0]) or _has_text(payload, _REASONING_KEYS[1])):
        return False
    return (
        not _has_text(payload, b'"content":')
        and b'"tool_calls":[{' not in payload
        and b'"tool_calls": [{' not in payload
    )


def carries_text(payload: bytes, completions: bool) -> bool:
    """True when an output chunk carries text (content, reasoning, a completion's text) or a tool call; False for
    an empty one (`"content":""`, counted as output by vLLM bench's rule). Asked of a stream's finish chunk only."""
    key = b'"text":"' if completions else b'"content":"'
    j = payload.find(key)  # the common finish chunk: the last token's text, compact (one search)
    if j >= 0 and payload[j + len(key) : j + len(key) + 1] != b'"':
        return True
    if completions:
        return _has_text(payload, b'"text":')
    if b'"tool_calls":[{' in payload or b'"tool_calls": [{' in payload:
        return True
    for k in _CONTENT_KEYS:
        if _has_text(payload, k):
            return True
    return False


def is_completion_output(payload: bytes) -> bool:
    """True when a completions chunk has choices (any, like vLLM bench)."""
    return b'"choices":[{' in payload or b'"choices": [{' in payload


def finish_reason_of(payload: bytes) -> str | None:
    """The chunk's finish_reason string; None when it is null or absent. One search for the compact form, which
    fails fast on the null of most chunks (a stream whose JSON is spaced is rewritten compact before this)."""
    j = payload.find(b'"finish_reason":"')
    if j < 0:
        return None
    j += 17
    k = payload.find(b'"', j)
    return payload[j:k].decode("utf-8", "replace") if k > j else None


def finish_reason_spaced(payload: bytes) -> str | None:
    """finish_reason_of for any whitespace after the colon (`"finish_reason": "stop"`): for the few events per
    stream that carry no output, where a gateway's own event may be spaced inside a compact stream."""
    j = payload.find(b'"finish_reason":')
    if j < 0:
        return None
    j += 16
    c = payload[j : j + 1]
    while c and c in b" \t\r\n":
        j += 1
        c = payload[j : j + 1]
    if c != b'"':
        return None
    k = payload.find(b'"', j + 1)
    return payload[j + 1 : k].decode("utf-8", "replace") if k > j + 1 else None


def has_object(payload: bytes, key: bytes) -> bool:
    """True when `key` (`"usage":`) is followed by a JSON object, whatever the whitespace before it."""
    j = payload.find(key)
    if j < 0:
        return False
    j += len(key)
    c = payload[j : j + 1]
    while c and c in b" \t\r\n":
        j += 1
        c = payload[j : j + 1]
    return c == b"{"
