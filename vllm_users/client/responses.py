"""The Responses API (`/v1/responses`) and the pooling APIs (`/v1/embeddings`, `/v1/rerank`, `/v1/score`) on the
wire: which SSE events carry output, and what their answers' usage says, in the chat API's usage names.

stream.py reads the bytes and keeps the clock; this module only classifies and decodes. Streamed Responses
events are told apart by a byte search for their `type` (JSON is parsed only for the terminal events, errors and
text when the scenario wants it); usage is renamed to chat's (`input_tokens` -> `prompt_tokens`, ...), so a
record is built the same way for every API (vllm_users/measure/record.py).
"""

from __future__ import annotations

import json
from typing import Any

from vllm_users.client.sse_forms import clean_message, error_message

__all__ = [
    "ANSWER",
    "APIS",
    "ERROR",
    "NONE",
    "POOLING",
    "REASONING",
    "TERMINAL",
    "classify",
    "dispatch",
    "finish_of",
    "path_of",
    "pooling_usage",
    "read_whole",
    "responses_usage",
    "whole_pooling",
    "whole_response",
]

# what each API is called (`--endpoint`) and its path
_PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
    "embeddings": "/v1/embeddings",
    "rerank": "/v1/rerank",
    "score": "/v1/score",
}
APIS = tuple(_PATHS)
POOLING = ("embeddings", "rerank", "score")  # one JSON answer each, no output tokens

# classify()'s kinds of a streamed Responses event
NONE, ANSWER, REASONING, TERMINAL, ERROR = 0, 1, 2, 3, 4

_TEXT_DELTA = b'_text.delta"'  # output_text, reasoning_text and reasoning_summary_text deltas share this tail
_ANSWER_DELTA = b'"response.output_text.delta"'
_TERMINALS = (b'"response.completed"', b'"response.incomplete"')
_ERRORS = (b'"response.failed"', b'"type":"error"', b'"type": "error"', b'{"error":{', b'{"error": {')


def path_of(api: str) -> str:
    """The URL path of an API name (chat, completions, responses, embeddings, rerank, score)."""
    return _PATHS[api]


def classify(payload: bytes) -> int:
    """What one streamed Responses event is: ANSWER or REASONING (an output delta), TERMINAL (completed or
    incomplete: usage), ERROR (`response.failed`, an `error` event) or NONE (created, item added, done, ...).

    Deltas are most events: one byte search decides them; the rest are a few per response."""
    if _TEXT_DELTA in payload:
        if _ANSWER_DELTA in payload:
            return ANSWER
        if (
            b'"response.reasoning_text.delta"' in payload
            or b'"response.reasoning_summary_text.delta"' in payload
        ):
            return REASONING
    for key in _TERMINALS:
        if key in payload:
            return TERMINAL
    for key in _ERRORS:
        if key in payload:
            return ERROR
    return NONE


def responses_usage(usage: Any) -> dict[str, Any] | None:
    """A Responses `usage` (`input_tokens`, `output_tokens`, `output_tokens_details.reasoning_tokens`,
    `input_tokens_details.cached_tokens`) in the chat API's names; None when it is not an object."""
    if not isinstance(usage, dict):
        return None
    out: dict[str, Any] = {}
    if isinstance(usage.get("input_tokens"), int):
        out["prompt_tokens"] = usage["input_tokens"]
    if isinstance(usage.get("output_tokens"), int):
        out["completion_tokens"] = usage["output_tokens"]
    if isinstance(usage.get("total_tokens"), int):
        out["total_tokens"] = usage["total_tokens"]
    inp = usage.get("input_tokens_details")
    if isinstance(inp, dict) and isinstance(inp.get("cached_tokens"), int):
        out["prompt_tokens_details"] = {"cached_tokens": inp["cached_tokens"]}
    det = usage.get("output_tokens_details")
    if isinstance(det, dict) and isinstance(det.get("reasoning_tokens"), int):
        out["completion_tokens_details"] = {"reasoning_tokens": det["reasoning_tokens"]}
    return out


def finish_of(response: dict[str, Any]) -> str:
    """A Responses object's end as a finish_reason: `length` when it stopped at max_output_tokens, else `stop`."""
    if response.get("status") == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        return "length" if reason in (None, "max_output_tokens") else str(reason)
    return "stop"


def error_of(payload: bytes) -> str:
    """The message of a `response.failed` or `error` event (at most 200 characters, credentials masked)."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return "error event in stream"
    return error_message(doc) or "error event in stream"


def terminal(payload: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(usage in chat's names, finish_reason) of a `response.completed` / `response.incomplete` event."""
    try:
        doc = json.loads(payload)
    except ValueError:
        return None, None
    resp = doc.get("response") if isinstance(doc, dict) else None
    if not isinstance(resp, dict):
        return None, None
    return responses_usage(resp.get("usage")), finish_of(resp)


def delta_text(payload: bytes) -> str:
    """The `delta` text of an output_text delta event ("" when it cannot be read)."""
    try:
        d = json.loads(payload).get("delta")
    except (ValueError, AttributeError):
        return ""
    return d if isinstance(d, str) else ""


def whole_response(doc: Any) -> tuple[str | None, dict[str, Any] | None, str | None, str | None]:
    """(answer text, usage in chat's names, finish_reason, problem) of a non-streamed Responses answer; problem
    is None when it is a response with an `output` list."""
    if not isinstance(doc, dict) or not isinstance(doc.get("output"), list):
        return None, None, None, "response has no output"
    parts: list[str] = []
    for item in doc["output"]:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for c in item.get("content") or ():
            if isinstance(c, dict) and c.get("type") == "output_text" and isinstance(c.get("text"), str):
                parts.append(c["text"])
    return "".join(parts), responses_usage(doc.get("usage")), finish_of(doc), None


def pooling_usage(usage: Any) -> dict[str, Any] | None:
    """A pooling answer's usage with `prompt_tokens` (vLLM's rerank says only `total_tokens`: all are input)."""
    if not isinstance(usage, dict):
        return None
    n = usage.get("prompt_tokens")
    if not isinstance(n, int):
        n = usage.get("total_tokens")
    return {"prompt_tokens": n} if isinstance(n, int) else {}


def whole_pooling(doc: Any, api: str) -> tuple[int, dict[str, Any] | None, str | None]:
    """(items answered, usage, error) of an embeddings (`data[].embedding`), rerank (`results[]`) or score
    (`data[].score`) answer; error is None when the answer has its list."""
    key = "results" if api == "rerank" else "data"
    items = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        return 0, None, f"{api} answer has no {key} list"
    return len(items), pooling_usage(doc.get("usage")), None


def dispatch(res: Any, payload: bytes, now: float, before_answer: bool, want_text: bool) -> bool:
    """One streamed Responses event into `res` (a client.stream.StreamResult) at `now`: an output delta is a
    chunk (a reasoning one before the answer counts as reasoning, as in chat); `response.completed` and
    `response.incomplete` carry usage and end the answer. Returns whether the answer is still to come."""
    kind = classify(payload)
    if kind == ANSWER or kind == REASONING:
        res.chunk_times.append(now)
        if before_answer:
            if kind == REASONING:
                res.reasoning_chunks += 1
            else:
                res.t_answer = now
                before_answer = False
        if want_text and kind == ANSWER:
            if res.text_parts is None:
                res.text_parts = []
            res.text_parts.append(delta_text(payload))
    elif kind == TERMINAL:
        usage, finish = terminal(payload)
        if usage is not None:
            res.usage = usage
        res.finish_reason = finish or "stop"
        res.done = True  # the Responses API's end: no [DONE] follows it
    elif kind == ERROR:
        res.error = "inband_error"
        res.error_detail = error_of(payload)
    return before_answer


def read_whole(doc: Any, res: Any, api: str, want_text: bool) -> None:
    """A non-streamed Responses or pooling answer `doc` into `res` (a client.stream.StreamResult whose t_end is
    set): its end is its one "chunk" (an E2EL), its usage in chat's names."""
    if api == "responses":
        if isinstance(doc, dict) and doc.get("status") == "failed":
            err = doc.get("error")
            res.usage = responses_usage(doc.get("usage"))
            res.error = "inband_error"
            res.error_detail = clean_message(
                (err.get("message") if isinstance(err, dict) else err) or "response failed"
            )
            return
        text, usage, finish, problem = whole_response(doc)
        if problem is not None:
            res.error, res.error_detail = "bad_response", problem
            return
        res.usage, res.finish_reason = usage, finish
        if want_text:
            res.text_parts = [text or ""]
    else:
        _, res.usage, problem = whole_pooling(doc, api)
        if problem is not None:
            res.error, res.error_detail = "bad_response", problem
            return
    res.chunk_times.append(res.t_end)
    res.done = True
