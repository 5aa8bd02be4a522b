"""The one record type: everything measured about one request, written as one JSON line.

Records are built here only: `record_from_stream` (a response was read), `interrupted_record` (the run
stopped it) and `dropped_record` (open loop: never sent); and read back by `read_records` / `parse_lines`.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from time import perf_counter
from typing import Any, Literal, Protocol

from vllm_users.measure.kinds import ERROR_KINDS, POOLING_ENDPOINTS, Api, ErrorKind

__all__ = [
    "AT_ONCE_US",
    "ERROR_KINDS",
    "POOLING_ENDPOINTS",
    "RequestRecord",
    "StreamOutcome",
    "add_images",
    "dropped_record",
    "epoch",
    "interrupted_record",
    "parse_lines",
    "read_records",
    "record_from_stream",
]


@dataclass(slots=True)
class RequestRecord:
    """One request: times are epoch seconds (t_*) or microseconds from start (chunk_times_us)."""

    scenario: str
    worker: str
    user: int
    seq: int
    endpoint: Api | Literal["-"]  # "-": dropped (never sent)
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
    error: ErrorKind | None = None  # None on success
    error_detail: str | None = None
    input_len: int | None = None  # requested prompt tokens
    output_len: int | None = None  # requested max_tokens
    turn: int | None = None  # 0-based position of the request in its session (multi-turn: the turn)
    session: int | None = None  # the session (index of the ticket that started it) the request belongs to
    valid: bool | None = None  # json/tools: validation verdict
    extra: dict[str, Any] | None = None
    # reasoning models and non-streamed answers: None when they do not apply (most requests have no reasoning)
    answer_us: int | None = None  # reasoning streamed: the first answer chunk (content/tool call), from start
    reasoning_tokens: int | None = (
        None  # usage.completion_tokens_details.reasoning_tokens, else reasoning chunks
    )
    reasoning_estimated: bool | None = None  # reasoning_tokens counted from chunks (the server did not say)
    not_streamed: bool | None = None  # True: a non-streamed answer (no TTFT/ITL: its one "chunk" is the end)
    # traffic classes, model mixes and trace replay: None when the run uses none of them
    request_class: str | None = None  # the --class (or trace tenant) the request belongs to
    model: str | None = (
        None  # the model name sent, when it is not the run's one model (a mix, a LoRA adapter)
    )
    # images: None when the request sent none (text requests are the common case)
    images: int | None = None  # image_url parts sent
    image_tokens: int | None = None  # prompt_tokens less the text's exact token count (absent when not exact)
    # several servers: None for a run against one URL, which keeps its records.jsonl as before
    host: str | None = None  # the endpoint sent to (host:port of one of several --host URLs; no credentials)
    replica: str | None = None  # --replica-header: the replica that answered, as the response said

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
        if d["host"] is None:  # one server: the line as before several could be named
            del d["host"]
        if d["replica"] is None:
            del d["replica"]
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

_WALL0, _PERF0 = time.time(), perf_counter()


def epoch(perf: float) -> float:
    """A perf_counter reading as epoch seconds (one anchor per process keeps them consistent)."""
    return _WALL0 + (perf - _PERF0)


class StreamOutcome(Protocol):
    """What a record takes from one read response (vllm_users.client.stream.StreamResult is one).

    A protocol, not an import: measure/ stays below client/ (the client imports nothing of measure/ either)."""

    t0: float  # perf_counter s, just before the request bytes were sent
    chunk_times: list[float]  # perf_counter s of each output-carrying chunk
    t_end: float
    status: int
    usage: dict[str, Any] | None
    finish_reason: str | None
    error: str | None
    error_detail: str | None
    streamed: bool
    reasoning_chunks: int  # reasoning-only output chunks before the first answer chunk
    t_answer: float  # perf_counter s of the first answer chunk (0.0: none)

    @property
    def empty_finish(self) -> bool:
        """True when the finish chunk carried no text (it proves no token)."""


# A success whose output chunks all came within this span was delivered at once (one read, or a buffered body's
# few reads microseconds apart): no engine decodes two tokens in 100 µs, so its chunk gaps time the proxy, not
# the server. Its TPOT and ITL are absent (docs/metrics.md).
AT_ONCE_US = 100


def record_from_stream(
    res: StreamOutcome,
    *,
    scenario: str,
    worker: str,
    user: int,
    seq: int,
    endpoint: str,
    t_intended: float | None,
    input_len: int | None,
    output_len: int | None,
    turn: int | None,
    session: int | None,
) -> RequestRecord:
    """The record of one response as read: chunk times from its start, tokens from usage (else counted).

    Two counts that cannot both be true are settled here and flagged in `extra`: usage below the output chunks
    streamed (each chunk carries a token's text at least) gives the chunks' count (`usage_tokens`: what usage
    said); a success whose chunks all came at once keeps one chunk time, its last (`chunks_at_once`: how
    many chunks came), so that TTFT = E2EL and no TPOT or ITL is made of the proxy's gaps."""
    t0 = res.t0
    usage = res.usage or {}
    out = usage.get("completion_tokens")
    details = usage.get("prompt_tokens_details") or {}
    reasoning, estimated = _reasoning_tokens(usage, res.reasoning_chunks)
    generates = endpoint not in POOLING_ENDPOINTS  # a pooling answer has no output tokens (None, never 0)
    times = res.chunk_times
    n = len(times)
    flags: dict[str, Any] = {}
    if generates and res.streamed and isinstance(out, int) and out < n:
        proven = n - 1 if res.empty_finish else n  # tokens the chunks prove (asked only here: rare)
        if out < proven:
            flags["usage_tokens"], out = out, proven
    chunk_times_us = [round((t - t0) * 1e6) for t in times]
    if res.streamed and res.error is None and n > 1 and chunk_times_us[-1] - chunk_times_us[0] <= AT_ONCE_US:
        flags["chunks_at_once"] = n
        chunk_times_us = chunk_times_us[-1:]
    rec = RequestRecord(
        scenario=scenario,
        worker=worker,
        user=user,
        seq=seq,
        endpoint=endpoint,  # type: ignore[arg-type]  # client/ and the scenarios spell APIs and error kinds
        t_start=epoch(t0),
        t_intended=t_intended,
        chunk_times_us=chunk_times_us,
        end_us=round((res.t_end - t0) * 1e6),
        prompt_tokens=usage.get("prompt_tokens"),
        output_tokens=out if isinstance(out, int) else (n or None) if generates else None,
        cached_tokens=details.get("cached_tokens") if isinstance(details, dict) else None,
        tokens_estimated=(not isinstance(out, int) or "usage_tokens" in flags) and generates,
        finish_reason=res.finish_reason,
        status=res.status,
        error=res.error,  # type: ignore[arg-type]  # as plain strings (no import of measure/); a unit test holds them
        error_detail=res.error_detail,
        input_len=input_len,
        output_len=output_len,
        turn=turn,
        session=session,
    )
    if reasoning is not None:
        rec.reasoning_tokens, rec.reasoning_estimated = reasoning, estimated
        if res.reasoning_chunks and res.t_answer:  # TTFA only when reasoning was streamed before the answer
            rec.answer_us = round((res.t_answer - t0) * 1e6)
    if not res.streamed:
        rec.not_streamed = True
    if flags:
        rec.extra = flags
    return rec


def _reasoning_tokens(usage: dict[str, Any], chunks: int) -> tuple[int | None, bool]:
    """(reasoning tokens, estimated): the server's count when it gives one above 0, else the reasoning
    chunks counted; (None, False) when the answer had no reasoning (a server's `reasoning_tokens: 0` too)."""
    details = usage.get("completion_tokens_details")
    told = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if isinstance(told, int) and told > 0:
        return told, False
    return (chunks, True) if chunks else (None, False)


def add_images(rec: RequestRecord, images: int, text_tokens: int | None) -> RequestRecord:
    """The record's image fields (after record_from_stream): `images` parts sent; image tokens = usage's
    prompt_tokens less `text_tokens` (the text's exact count, template included), None when that is unknown
    or the server's count is below it (vLLM reports no image tokens of its own: docs/metrics.md)."""
    if images > 0:
        rec.images = images
        p = rec.prompt_tokens
        if text_tokens is not None and p is not None and p >= text_tokens:
            rec.image_tokens = p - text_tokens
    return rec


def interrupted_record(
    *,
    scenario: str,
    worker: str,
    user: int,
    seq: int,
    endpoint: str,
    t_intended: float | None,
    input_len: int | None,
    output_len: int | None,
    turn: int | None,
    session: int | None,
    host: str | None = None,
) -> RequestRecord:
    """The record of a request the run's end stopped while it streamed (Ctrl-C, stop timeout); `host`: its
    endpoint when the run has several."""
    return RequestRecord(
        scenario=scenario,
        worker=worker,
        user=user,
        seq=seq,
        endpoint=endpoint,  # type: ignore[arg-type]
        t_start=time.time(),
        t_intended=t_intended,
        error="interrupted",
        error_detail="run stopped while the request was in flight",
        input_len=input_len,
        output_len=output_len,
        turn=turn,
        session=session,
        host=host,
    )


def dropped_record(worker: str, seq: int, t_intended: float) -> RequestRecord:
    """Open loop: an arrival that was due at `t_intended` but never sent (no free user before the run ended)."""
    return RequestRecord(
        scenario="-",
        worker=worker,
        user=-1,
        seq=seq,
        endpoint="-",
        t_start=t_intended,
        t_intended=t_intended,
        error="dropped",
        error_detail="no free user before the run ended",
    )


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
