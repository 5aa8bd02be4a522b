"""Send one OpenAI request and read its SSE stream as bytes arrive, timing every output chunk.

Hot path rules (docs/metrics.md): the clock is read right after each recv(), before parsing; events are
classified by byte search, and JSON is parsed only for what must be parsed (usage, errors, and the whole
event when the scenario needs text or tool calls).
"""

from __future__ import annotations

import json
import os
from time import perf_counter
from typing import Any

import gevent

from vllm_users.client import responses as R
from vllm_users.client import sse_forms as F
from vllm_users.client.deadlines import NO_LIMITS, DeadlineExceeded, Limits
from vllm_users.client.ghc_adapter import (
    HTTPClient,
    HTTPConnectionClosed,
    HTTPParseError,
    close_broken,
    response_socket,
)
from vllm_users.client.reactor import HAVE_EPOLL, reactor
from vllm_users.client.sse_events import SseEvents, StreamResult
from vllm_users.client.wire import BLOCK, StampedResponse, post

# Bodies are read by one epoll in the hub (vllm_users/client/reactor.py); without epoll (macOS), or with
# VLLM_LOCUST_REACTOR=0, each stream's greenlet reads its own socket.
USE_REACTOR = HAVE_EPOLL and os.environ.get("VLLM_LOCUST_REACTOR", "1") != "0"


__all__ = ["Limits", "USE_REACTOR", "StreamResult", "replica_of", "send_and_read"]


def send_and_read(
    client: HTTPClient,
    path: str,
    body: bytes,
    headers: dict[str, str],
    *,
    api: str = "chat",
    stream: bool = True,
    want_text: bool = False,
    replica_header: str = "",
    limits: Limits = NO_LIMITS,
) -> StreamResult:
    """POST `body` and read the answer; never raises for server or network faults (they become errors).

    `api` (chat, completions, responses, embeddings, rerank, score: client/responses.py) says how to read it;
    `replica_header` (lowercase; "": none): the response header whose value is kept as `res.replica`;
    `limits`: the request's deadlines (--request-timeout, --stall-timeout: client/deadlines.py)."""
    resp = None
    res = StreamResult(t0=perf_counter())
    events = SseEvents(res, api, want_text)
    # until the headers (and the whole of a non-streamed answer) one gevent timer per request bounds the wait;
    # a stream's body is checked by its reader, off the per-chunk path
    head_s = limits.first(stream)
    timer = gevent.Timeout(head_s, limits.header_error(stream)) if head_s else None
    try:
        if timer is not None:
            timer.start()
        res.t0, resp = post(client, path, body, headers)
        now = resp.stamp
        res.status = resp.status_code
        if replica_header:  # once per response, before the body: no cost per chunk
            res.replica = replica_of(resp.get(replica_header))
        if res.status != 200:
            res.error = "http"
            msg = F.body_error(resp.read(65536), str(resp.get("content-encoding") or ""))
            res.error_detail = f"HTTP {res.status}: {msg}"
            return res
        encoding = str(resp.get("content-encoding") or "")
        coded = F.unasked_transfer_coding(resp.get("transfer-encoding"))
        if coded is not None:  # the parser leaves such a body coded: no event would ever be found in it
            res.error, res.error_detail = "bad_response", coded
            return res
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
        if timer is not None:
            timer.close()
        if USE_REACTOR:
            reactor().read_body(resp, sink, now, res, limits)
        else:
            _read_stream(resp, sink, now, res, limits)
    except DeadlineExceeded as e:  # the tokens so far stay in the result (and the record)
        res.error, res.error_detail = e.kind, e.detail
        e.__traceback__ = None  # a header timer's error is shared by the user's requests: keep no frames
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
        said = f" ({F.unasked_coding('Content-Encoding', res.encoding)})" if res.encoding else ""
        res.error, res.error_detail = "bad_response", (str(e)[: 200 - len(said)] + said)
    finally:
        if timer is not None:
            timer.close()
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
            if res.encoding:  # decoded, yet cut short: the coding the proxy added may be why
                res.error_detail += f" ({F.unasked_coding('Content-Encoding', res.encoding)})"
        elif not res.chunk_times:
            only_usage = res.usage is not None and not res.choice_events
            res.error = "usage_only" if only_usage else "no_output"
            res.error_detail = (
                "stream carried only a usage chunk" if only_usage else "stream carried no output"
            )
    return res


REPLICA_MAX = 64  # characters of a replica's name kept (a server's header: bounded in records and results)


def replica_of(value: str | list[str] | None) -> str | None:
    """A replica header's value as a record keeps it: the first when repeated, at most REPLICA_MAX characters;
    None when absent or empty."""
    if isinstance(value, list):
        value = value[0] if value else None
    value = (value or "").strip()
    return value[:REPLICA_MAX] or None


def _read_stream(
    resp: StampedResponse, events: F.Feed, now: float, res: StreamResult, limits: Limits = NO_LIMITS
) -> None:
    """The greenlet reader (no epoll): the body read here, the deadlines checked once per read; a server silent
    past the request's deadline is cut by one gevent timer, a silent one by the socket's --stream-timeout."""
    if limits.request_s > 0:
        left = limits.deadline(res.t0) - perf_counter()
        if left <= 0:
            raise limits.overran()
        with gevent.Timeout(left, limits.overran()):
            _read_checked(resp, events, now, res, limits)
    else:
        _read_checked(resp, events, now, res, limits)


def _read_checked(
    resp: StampedResponse, events: F.Feed, now: float, res: StreamResult, limits: Limits
) -> None:
    recv = resp.recv_stamped
    deadline, last, seen = limits.deadline(res.t0), res.t0, 0
    checked = limits.any
    while not resp.drain_into(events, now):
        if checked:
            n = len(res.chunk_times)
            if n != seen:
                seen, last = n, res.chunk_times[-1]
            err = limits.check(perf_counter(), deadline, last, n)
            if err is not None:
                raise err
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
