"""A response's events, read as they arrive: `StreamResult` (what one response told us) and `SseEvents`, which
dispatches SSE events into it (chat, completions and the Responses API; compact, spaced and error events).

Hot path rules (docs/metrics.md): events are classified by byte search, and JSON is parsed only for what must
be parsed (usage, errors, and the whole event when the scenario needs text or tool calls).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vllm_users.client import responses as R
from vllm_users.client import sse_forms as F
from vllm_users.client.chunks import (
    carries_text,
    finish_reason_of,
    finish_reason_spaced,
    has_object,
    is_chat_output,
    is_completion_output,
    is_reasoning_only,
)

__all__ = ["DONE", "SseEvents", "StreamResult"]

DONE = _DONE = b"[DONE]"


@dataclass(slots=True)
class StreamResult:
    """What one response told us: output chunk times (perf_counter s), usage, errors, optional text."""

    t0: float
    chunk_times: list[float] = field(default_factory=list)
    t_end: float = 0.0
    status: int = 0
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False  # `data: [DONE]` came (False on a success: a complete body with a finish_reason)
    choice_events: int = 0  # events with a non-empty choices list (role chunk, finish chunk, output)
    error: str | None = None
    error_detail: str | None = None
    text_parts: list[str] | None = None
    tool_calls: dict[int, dict[str, Any]] | None = None  # index -> {"id","name","arguments"}
    body: Any = None  # non-streamed: the decoded JSON answer
    streamed: bool = True  # False: a non-streamed answer (one JSON body; its only "chunk" is the end)
    reasoning_chunks: int = 0  # output chunks that carried reasoning only, before the first answer chunk
    t_answer: float = 0.0  # perf_counter s of the first answer chunk (content or tool call); 0.0 before it
    encoding: str | None = None  # the body's Content-Encoding when the server compressed it (decoded here)
    replica: str | None = None  # --replica-header: the replica that answered, as its response header said
    finish_event: bytes | None = None  # the output event that carried the finish_reason

    @property
    def empty_finish(self) -> bool:
        """True when the output event with the finish_reason carried no text (`"content":""`: it proves no
        token). Asked only of a stream whose usage says fewer tokens than its chunks, so never per chunk."""
        ev = self.finish_event
        return ev is not None and not carries_text(
            ev, b'"delta"' not in ev
        )  # completions chunks have no delta

    @property
    def text(self) -> str:
        """Generated text (only collected when asked for)."""
        return "".join(self.text_parts or ())


class SseEvents:
    """Dispatch SSE events into a StreamResult (spec: data lines joined, dispatch on blank line)."""

    __slots__ = (
        "res",
        "completions",
        "want_text",
        "pending",
        "data",
        "_is_out",
        "_after_cr",
        "_before_answer",
        "_responses",
        "_mode",
    )

    def __init__(self, res: StreamResult, api: str, want_text: bool) -> None:
        self.res = res
        self.completions = completions = api == "completions"
        self._responses = api == "responses"  # /v1/responses: typed events (client/responses.py), no [DONE]
        self.want_text = want_text
        self.pending = b""
        self.data: list[bytes] = []
        self._is_out = is_completion_output if completions else is_chat_output
        self._after_cr = False  # the last read ended in CR: an LF that starts the next one belongs to it
        self._before_answer = not completions  # chat: no answer chunk yet (reasoning may come first)
        # How events are read is this object's class, so that vLLM's compact stream pays no test per event: the
        # first event tells (_FirstEvent), then SseEvents (compact JSON) or _SpacedEvents; _ErrorEvent for the
        # event after an `event: error` line, then back to _mode.
        self._mode: type[SseEvents] = _FirstEvent
        self.__class__ = _FirstEvent

    def feed(self, data: bytes, now: float) -> None:
        """Process newly received body bytes that arrived at perf_counter time `now`.

        Lines end in CRLF, LF or a lone CR (the SSE spec allows all three). A CR ends its line at once, also
        as the last byte of a read, so an event is timed by the read that completed it; the LF of a CRLF
        split across reads is then dropped from the next read."""
        if self._after_cr:
            self._after_cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:  # one memchr; LF-only streams (vLLM's) pay nothing more
            self._after_cr = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n")
            if b"\r" in data:  # lone CRs (rare): a second copy only for them
                data = data.replace(b"\r", b"\n")
        if self.pending:
            data = self.pending + data
        lines = data.split(b"\n")
        self.pending = lines.pop()
        for line in lines:
            if not line:
                if self.data:
                    self._dispatch(self.data[0] if len(self.data) == 1 else self._joined(), now)
                    self.data = []
                else:  # an event without data is not dispatched; its type goes with it
                    self.__class__ = self._mode
            elif line.startswith(b"data:"):
                self.data.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line.startswith(b"event:") and line[6:].strip() == b"error":
                self.__class__ = _ErrorEvent
            # comment lines (":...") and other fields (other events, id:, retry:) are ignored

    def finish(self, now: float) -> None:
        """End of body: dispatch a last event that had no blank line after it."""
        if self.pending.startswith(b"data:"):
            # a torn half line never completes: it is evidence of truncation, not an event
            if not self.res.done and self.res.error is None:
                self.res.error = "truncated"
                self.res.error_detail = "stream ended inside an event line"
            self.pending = b""
        if self.data:
            self._dispatch(self.data[0] if len(self.data) == 1 else self._joined(), now)
            self.data = []

    def _joined(self) -> bytes:
        """A multi-line event's data: its `data:` lines joined by LF (JSON whitespace), rewritten compact."""
        return F.compact(b"\n".join(self.data))

    def _dispatch(self, payload: bytes, now: float) -> None:
        res = self.res
        if payload[:6] == _DONE:
            res.done = True
            return
        if self._responses:
            self._dispatch_responses(payload, now)
            return
        if self._is_out(payload):
            res.chunk_times.append(now)
            if self._before_answer:  # one attribute test per chunk once the answer started
                if is_reasoning_only(payload):
                    res.reasoning_chunks += 1
                else:
                    res.t_answer = now
                    self._before_answer = False
            if self.want_text:
                self._collect(payload)
            fr = finish_reason_of(payload)  # one search; null on most chunks
            if fr:
                res.finish_reason = fr
                res.finish_event = payload  # once per stream; read only when usage is below the chunks
            if b'"usage":' in payload and has_object(payload, b'"usage":'):  # one search; usually absent
                self._usage(payload)
            return
        # a few events per stream (role, usage): searched in any spacing, as a gateway may add its own spaced
        # event to a compact stream (the stream's first event decided how the rest is read)
        if b'"choices":[{' in payload or b'"choices": [{' in payload:
            res.choice_events += 1
        if b'"error"' in payload and b'"choices"' not in payload:
            self._error(payload)
            return
        if b'"usage":' in payload and has_object(payload, b'"usage":'):
            self._usage(payload)
        fr = finish_reason_spaced(payload)
        if fr:
            res.finish_reason = fr

    def _error(self, payload: bytes, named: bool = False) -> None:
        """An error event: the server's own message in the record (`{"error": {...}}`, OpenAI's `event: error`)."""
        try:
            msg = F.error_message(json.loads(payload))
        except ValueError:
            msg = F.clean_message(payload.decode("utf-8", "replace")) if named else None
        self.res.error = "inband_error"
        self.res.error_detail = msg or "error event in stream"

    def _dispatch_responses(self, payload: bytes, now: float) -> None:
        """One Responses event (client/responses.py: `dispatch`)."""
        self._before_answer = R.dispatch(self.res, payload, now, self._before_answer, self.want_text)

    def _usage(self, payload: bytes) -> None:
        try:
            usage = json.loads(payload).get("usage")
        except ValueError:
            return
        if isinstance(usage, dict):
            self.res.usage = usage

    def _collect(self, payload: bytes) -> None:
        try:
            choice = json.loads(payload)["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            return
        res = self.res
        if res.text_parts is None:
            res.text_parts = []
        if self.completions:
            res.text_parts.append(choice.get("text") or "")
            return
        delta = choice.get("delta") or {}
        if delta.get("content"):
            res.text_parts.append(delta["content"])
        for tc in delta.get("tool_calls") or ():
            if res.tool_calls is None:
                res.tool_calls = {}
            slot = res.tool_calls.setdefault(tc.get("index", 0), {"id": None, "name": None, "arguments": ""})
            fn = tc.get("function") or {}
            if tc.get("id"):
                slot["id"] = tc["id"]
            if fn.get("name"):
                slot["name"] = fn["name"]
            if fn.get("arguments"):
                slot["arguments"] += fn["arguments"]


class _FirstEvent(SseEvents):
    """A stream's first event tells how the rest is read: compact JSON (vLLM's) as it comes, else rewritten."""

    __slots__ = ()

    def _dispatch(self, payload: bytes, now: float) -> None:
        if payload[:1] != b"{":  # [DONE] or not JSON: the next event tells
            SseEvents._dispatch(self, payload, now)
            return
        self._mode = SseEvents if F.is_compact(payload) else _SpacedEvents
        _become(self, self._mode)
        self._dispatch(payload, now)


class _SpacedEvents(SseEvents):
    """A stream whose JSON is not compact (a re-serializing proxy's `"usage": {`): each event rewritten compact,
    then read like vLLM's."""

    __slots__ = ()

    def _dispatch(self, payload: bytes, now: float) -> None:
        SseEvents._dispatch(self, payload if payload[:6] == _DONE else F.compact(payload), now)


class _ErrorEvent(SseEvents):
    """The data of an `event: error` (OpenAI's error events): the stream's error, in the server's words."""

    __slots__ = ()

    def _dispatch(self, payload: bytes, now: float) -> None:
        _become(self, self._mode)
        self._error(payload, named=True)


def _become(events: SseEvents, cls: type[SseEvents]) -> None:
    """Switch how `events` reads the events to come (same slots: only the methods change)."""
    events.__class__ = cls
