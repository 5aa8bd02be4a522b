"""Send one OpenAI request and read its SSE stream as bytes arrive, timing every output chunk.

Hot path rules (docs/metrics.md): the clock is read right after each recv(), before parsing; events are
classified by byte search, and JSON is parsed only for what must be parsed (usage, errors, and the whole
event when the scenario needs text or tool calls).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import gevent

from vllm_users.client import responses as R
from vllm_users.client import sse_forms as F
from vllm_users.client.chunks import (  # noqa: F401 - is_chat_output, is_completion_output: imported from here too
    finish_reason_of,
    finish_reason_spaced,
    has_object,
    is_chat_output,
    is_completion_output,
    is_reasoning_only,
)
from vllm_users.client.ghc_adapter import (
    HTTPClient,
    HTTPConnectionClosed,
    HTTPParseError,
    close_broken,
    response_socket,
)
from vllm_users.client.reactor import HAVE_EPOLL, reactor
from vllm_users.client.wire import BLOCK, StampedResponse, post

# Bodies are read by one epoll in the hub (vllm_users/client/reactor.py); without epoll (macOS), or with
# VLLM_LOCUST_REACTOR=0, each stream's greenlet reads its own socket.
USE_REACTOR = HAVE_EPOLL and os.environ.get("VLLM_LOCUST_REACTOR", "1") != "0"

_DONE = b"[DONE]"


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

    @property
    def text(self) -> str:
        """Generated text (only collected when asked for)."""
        return "".join(self.text_parts or ())


class _Events:
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
        # first event tells (_FirstEvent), then _Events (compact JSON) or _SpacedEvents; _ErrorEvent for the
        # event after an `event: error` line, then back to _mode.
        self._mode: type[_Events] = _FirstEvent
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


class _FirstEvent(_Events):
    """A stream's first event tells how the rest is read: compact JSON (vLLM's) as it comes, else rewritten."""

    __slots__ = ()

    def _dispatch(self, payload: bytes, now: float) -> None:
        if payload[:1] != b"{":  # [DONE] or not JSON: the next event tells
            _Events._dispatch(self, payload, now)
            return
        self._mode = _Events if F.is_compact(payload) else _SpacedEvents
        _become(self, self._mode)
        self._dispatch(payload, now)


class _SpacedEvents(_Events):
    """A stream whose JSON is not compact (a re-serializing proxy's `"usage": {`): each event rewritten compact,
    then read like vLLM's."""

    __slots__ = ()

    def _dispatch(self, payload: bytes, now: float) -> None:
        _Events._dispatch(self, payload if payload[:6] == _DONE else F.compact(payload), now)


class _ErrorEvent(_Events):
    """The data of an `event: error` (OpenAI's error events): the stream's error, in the server's words."""

    __slots__ = ()

    def _dispatch(self, payload: bytes, now: float) -> None:
        _become(self, self._mode)
        self._error(payload, named=True)


def _become(events: _Events, cls: type[_Events]) -> None:
    """Switch how `events` reads the events to come (same slots: only the methods change)."""
    events.__class__ = cls


def send_and_read(
    client: HTTPClient,
    path: str,
    body: bytes,
    headers: dict[str, str],
    *,
    api: str = "chat",
    stream: bool = True,
    want_text: bool = False,
) -> StreamResult:
    """POST `body` and read the answer; never raises for server or network faults (they become errors).

    `api` (chat, completions, responses, embeddings, rerank, score: client/responses.py) says how to read it."""
    resp = None
    res = StreamResult(t0=perf_counter())
    events = _Events(res, api, want_text)
    try:
        res.t0, resp = post(client, path, body, headers)
        now = resp.stamp
        res.status = resp.status_code
        if res.status != 200:
            res.error = "http"
            msg = F.body_error(resp.read(65536), str(resp.get("content-encoding") or ""))
            res.error_detail = f"HTTP {res.status}: {msg}"
            return res
        encoding = str(resp.get("content-encoding") or "")
        if not stream:
            _read_whole(resp, res, api, want_text, encoding)
            return res
        ctype = str(resp.get("content-type") or "")
        if not F.is_event_stream(ctype):
            res.error, res.error_detail = F.not_a_stream(resp.read(65536), ctype, encoding)
            return res
        sink: Any = events
        if (
            encoding
        ):  # a proxy compressed the stream (against `Accept-Encoding: identity`): decoded as it comes
            try:
                dec = F.decoder(encoding)
            except F.DecodeError as e:
                res.error, res.error_detail = "bad_response", str(e)
                return res
            if dec is not None:
                res.encoding = encoding.strip().lower()
                sink = F.Decoded(events, dec)
        if USE_REACTOR:
            reactor().read_body(resp, sink, now)
        else:
            _read_stream(resp, sink, now)
    except (gevent.Timeout, TimeoutError):
        res.error = "timeout"
        res.error_detail = "read timed out" if res.status else "connect or header timeout"
    except ConnectionResetError as e:
        res.error = "connection"
        res.error_detail = ("connection reset mid-stream" if res.status else f"connection reset: {e}")[:200]
    except (HTTPConnectionClosed, ConnectionError, OSError) as e:
        if res.status == 200:
            res.error = "truncated"
            res.error_detail = f"connection lost mid-stream: {type(e).__name__}"
        else:
            res.error = "connection"
            res.error_detail = f"{type(e).__name__}: {e}"[:200]
    except HTTPParseError as e:
        res.error = "truncated" if res.status == 200 else "bad_response"
        res.error_detail = f"HTTP parse error: {e}"[:200]
    except F.DecodeError as e:
        res.error, res.error_detail = "bad_response", str(e)[:200]
    finally:
        res.t_end = perf_counter()
        if resp is not None and res.error is not None:
            close_broken(resp)  # a half-read connection must not go back to the pool
    if res.status == 200 and stream and res.error is None:
        # the body's framing ended (an error otherwise): with a finish_reason it is a whole answer, [DONE] or not
        # (vLLM bench's rule too); `done` stays False and the record says so (docs/failure_kinds.md)
        if not res.done and res.finish_reason is None:
            res.error = "truncated"
            end = "response.completed" if api == "responses" else "[DONE]"
            res.error_detail = f"stream ended without {end}"
        elif not res.chunk_times:
            only_usage = res.usage is not None and not res.choice_events
            res.error = "usage_only" if only_usage else "no_output"
            res.error_detail = (
                "stream carried only a usage chunk" if only_usage else "stream carried no output"
            )
    return res


def _read_stream(resp: StampedResponse, events: F.Feed, now: float) -> None:
    recv = resp.recv_stamped
    while not resp.drain_into(events, now):
        sock = response_socket(resp)
        if sock is None:
            raise HTTPConnectionClosed("connection closed")
        chunk = recv(sock, BLOCK)
        if resp.stamp > now:  # stamps follow the byte order; guard against a clock step all the same
            now = resp.stamp
        if chunk:
            resp.feed(chunk)
        else:
            resp.end_of_input()  # complete when the close delimits the body; else raises
    events.finish(now)


def _read_whole(resp: Any, res: StreamResult, api: str, want_text: bool, encoding: str = "") -> None:
    raw = resp.read()
    res.t_end = perf_counter()
    try:
        if encoding:
            raw = F.decode_all(raw, encoding)
            res.encoding = encoding.strip().lower() if F.decoder(encoding) is not None else None
        doc = json.loads(raw)
    except F.DecodeError as e:
        res.error, res.error_detail = "bad_response", str(e)[:200]
        return
    except ValueError:
        res.error = "bad_response"
        res.error_detail = "response is not JSON"
        return
    res.body = doc
    res.streamed = False
    if api in R.POOLING or api == "responses":
        R.read_whole(doc, res, api, want_text)
        return
    completions = api == "completions"
    res.usage = doc.get("usage") if isinstance(doc, dict) else None
    try:
        choice = doc["choices"][0]
    except (KeyError, IndexError, TypeError):
        res.error = "bad_response"
        res.error_detail = "response has no choices"
        return
    res.finish_reason = choice.get("finish_reason")
    res.chunk_times.append(res.t_end)  # non-streamed: first output == end
    res.done = True
    if want_text:
        msg = choice.get("text") if completions else (choice.get("message") or {}).get("content")
        res.text_parts = [msg or ""]
        calls = (choice.get("message") or {}).get("tool_calls") if not completions else None
        if calls:
            res.tool_calls = {
                i: {"id": c.get("id"), "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for i, c in enumerate(calls)
            }
