"""The one record type: everything measured about one request, written as one JSON line."""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

# Error kinds, written down in one place (docs/failure_kinds.md explains each).
ERROR_KINDS = (
    "http",  # non-2xx status (status field holds the code)
    "connection",  # connect refused/reset before or during the request
    "timeout",  # connect or read timeout
    "truncated",  # stream ended without [DONE] / torn line
    "inband_error",  # an {"error": ...} event inside a 200 stream
    "no_output",  # stream finished without any output-carrying chunk (e.g. zero tokens)
    "usage_only",  # stream carried a usage chunk and nothing else
    "bad_response",  # not SSE / not OpenAI-shaped (e.g. HTML page)
    "invalid_json",  # json scenario: output does not parse or does not match the schema
    "invalid_tool_call",  # tools scenario: tool call missing, unknown name or bad arguments
    "interrupted",  # stopped by the run ending (Ctrl-C, stop timeout) while streaming
    "dropped",  # open loop: scheduled but never sent (never becomes a request to the server)
)


@dataclass(slots=True)
class RequestRecord:
    """One request: times are epoch seconds (t_*) or microseconds from start (chunk_times_us)."""

    scenario: str
    worker: str
    user: int
    seq: int
    endpoint: str  # "chat" | "completions"
    t_start: float  # epoch s, just before the request bytes were sent
    t_intended: float | None = None  # epoch s, open loop: when the schedule said to send
    chunk_times_us: list[int] = field(default_factory=list)  # each output-carrying chunk, from start
    end_us: int = 0  # end of the response body (after usage and [DONE]), from start
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    tokens_estimated: bool = False  # output_tokens not from usage
    finish_reason: str | None = None
    status: int = 0
    error: str | None = None  # one of ERROR_KINDS, None on success
    error_detail: str | None = None
    input_len: int | None = None  # requested prompt tokens
    output_len: int | None = None  # requested max_tokens
    turn: int | None = None  # 0-based position of the request in its session (multi-turn: the turn)
    session: int | None = None  # the session (index of the ticket that started it) the request belongs to
    valid: bool | None = None  # json/tools: validation verdict
    extra: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """True when the request succeeded."""
        return self.error is None

    @property
    def ttft_s(self) -> float | None:
        """Time to first output chunk in seconds."""
        return self.chunk_times_us[0] / 1e6 if self.chunk_times_us else None

    @property
    def e2el_s(self) -> float | None:
        """Start to last output chunk in seconds."""
        return self.chunk_times_us[-1] / 1e6 if self.chunk_times_us else None

    def to_json(self) -> str:
        """Serialise as one compact JSON line (no newline)."""
        # one C attrgetter instead of dataclasses.asdict's recursive copy (a worker does this per request)
        d = dict(zip(_FIELD_NAMES, _get_fields(self), strict=False))
        if d["extra"] is None:
            del d["extra"]
        return _encode(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        """Build from a decoded JSON line, ignoring unknown keys (forward compatible)."""
        return cls(**{k: d[k] for k in _FIELD_NAMES if k in d})


_FIELD_NAMES = tuple(f.name for f in fields(RequestRecord))
_get_fields = operator.attrgetter(*_FIELD_NAMES)
_encode = json.JSONEncoder(separators=(",", ":")).encode


_FIELD_SET = frozenset(_FIELD_NAMES)
_decode = json.JSONDecoder().decode


def read_records(path: str) -> tuple[list[RequestRecord], int]:
    """Read a JSONL records file; returns (records, number of torn/unparseable lines skipped)."""
    # Text mode decodes UTF-8 in large blocks (errors="replace": a torn multi-byte tail makes that line
    # bad, not the file); lines that carry only our fields skip from_dict's filtering. ~2.5x faster.
    with open(path, encoding="utf-8", errors="replace") as fh:
        return parse_lines(fh)


def parse_lines(lines: Iterable[str]) -> tuple[list[RequestRecord], int]:
    """Records from JSON lines (blank lines ignored), and how many lines were torn or unparseable."""
    out: list[RequestRecord] = []
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            d = _decode(line)
            out.append(RequestRecord(**d) if d.keys() <= _FIELD_SET else RequestRecord.from_dict(d))
        except (ValueError, TypeError, AttributeError):  # AttributeError: a line that is not an object
            bad += 1
    return out, bad
