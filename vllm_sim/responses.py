"""The Responses API (`/v1/responses`) on the chat engine: the request becomes a chat request (same prompt tokens,
same plan, same TTFT/ITL), its output is written as vLLM's Responses events.

Streamed: `response.created`, `response.in_progress`, `response.output_item.added`, `response.content_part.added`,
one `response.output_text.delta` (or `response.reasoning_text.delta` while reasoning) per output event, then
`response.output_text.done` ... `response.completed` with `usage` (`input_tokens`, `output_tokens`,
`output_tokens_details.reasoning_tokens`); no `[DONE]`. Not streamed: one `response` object with `output` and
`usage`.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .request import ApiError, Plan, SimRequest, json_object

__all__ = ["ResponsesWriter", "as_chat_body", "full_response"]


def as_chat_body(raw: bytes) -> bytes:
    """A Responses request body as the chat body the engine reads: `input` (text or messages) and `instructions`
    as messages, `max_output_tokens` as max_tokens, usage always (it ends the stream)."""
    body = json_object(raw)
    inp = body.get("input")
    if isinstance(inp, str):
        messages: list[Any] = [{"role": "user", "content": inp}]
    elif isinstance(inp, list) and inp and all(isinstance(m, dict) for m in inp):
        messages = [{"role": m.get("role", "user"), "content": m.get("content", "")} for m in inp]
    else:
        raise ApiError(400, "input: a string or a non-empty list of messages is required", "input")
    if isinstance(body.get("instructions"), str):
        messages.insert(0, {"role": "system", "content": body["instructions"]})
    chat: dict[str, Any] = {"messages": messages}
    for key in ("model", "temperature", "seed", "ignore_eos", "stream"):
        if key in body:
            chat[key] = body[key]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return json.dumps(chat).encode()


def _event(kind: str, seq: int, **fields: Any) -> str:
    """One SSE event as vLLM writes it: an `event:` line and the JSON with its type and sequence number."""
    return (
        f"event: {kind}\ndata: "
        + json.dumps({**fields, "sequence_number": seq, "type": kind}, separators=(",", ":"))
        + "\n\n"
    )


def _usage(prompt: int, completion: int, reasoning: int, cached: int | None) -> dict[str, Any]:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached or 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def _response(
    req: SimRequest, created: int, status: str, output: list[Any], usage: Any, length: bool
) -> dict[str, Any]:
    return {
        "id": "resp_" + req.request_id.rpartition("-")[2],
        "created_at": created,
        "model": req.model,
        "object": "response",
        "output": output,
        "status": status,
        "usage": usage,
        "incomplete_details": {"reason": "max_output_tokens"} if length else None,
        "max_output_tokens": req.max_tokens,
    }


class ResponsesWriter:
    """Renders one streamed Responses request (the interface of wire.ChunkWriter that stream.Stream uses)."""

    done_event = None  # no `data: [DONE]` after response.completed

    def __init__(self, req: SimRequest, plan: Plan, created: int | None = None) -> None:
        self.req = req
        self.plan = plan
        self.created = int(time.time()) if created is None else created
        self.item = "msg_" + req.request_id.rpartition("-")[2]
        self.seq = 0
        self.cached_tokens: int | None = None
        self.head = (
            'event: response.output_text.delta\ndata: {"content_index":0,"delta":'  # a torn line's start
        )

    def _next(self, kind: str, **fields: Any) -> str:
        self.seq += 1
        return _event(kind, self.seq - 1, **fields)

    def role(self) -> str:
        """The opening events (before the first output)."""
        r = _response(self.req, self.created, "in_progress", [], None, False)
        item = {
            "id": self.item,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        return (
            self._next("response.created", response=r)
            + self._next("response.in_progress", response=r)
            + self._next("response.output_item.added", item=item, output_index=0)
            + self._next(
                "response.content_part.added",
                item_id=self.item,
                output_index=0,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            )
        )

    def pieces(self, p0: int, p1: int, n_done: int, last: bool) -> str:
        """Output pieces p0:p1 as deltas: reasoning ones first while the plan thinks, then answer text."""
        plan = self.plan
        out = ""
        r = min(p1, plan.reasoning)
        if p0 < r:
            out += self._next(
                "response.reasoning_text.delta",
                item_id="rs_" + self.item,
                output_index=0,
                content_index=0,
                delta="".join(plan.pieces[p0:r]),
            )
        if p1 > max(p0, r):
            out += self._next(
                "response.output_text.delta",
                item_id=self.item,
                output_index=0,
                content_index=0,
                delta="".join(plan.pieces[max(p0, r) : p1]),
                logprobs=[],
            )
        return out

    def tool_header(self, last: bool) -> str:
        """Not used: the Responses route sends no tools."""
        return ""

    def empty_finish(self) -> str:
        """The end of a text with nothing in it (zero_tokens fault)."""
        return self._next(
            "response.output_text.done", item_id=self.item, output_index=0, content_index=0, text=""
        )

    def usage(self, completion: int) -> str:
        """The closing events: text done, part and item done, `response.completed` (or incomplete) with usage."""
        plan = self.plan
        r = min(plan.reasoning, completion)
        text = "".join(plan.pieces[r:completion])
        length = plan.finish_reason == "length"
        msg = {
            "id": self.item,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        resp = _response(
            self.req,
            self.created,
            "incomplete" if length else "completed",
            [msg],
            _usage(self.req.prompt_tokens, completion, r, self.cached_tokens),
            length,
        )
        return (
            self._next(
                "response.output_text.done",
                item_id=self.item,
                output_index=0,
                content_index=0,
                text=text,
                logprobs=[],
            )
            + self._next(
                "response.content_part.done",
                item_id=self.item,
                output_index=0,
                content_index=0,
                part=msg["content"][0],
            )
            + self._next("response.output_item.done", item=msg, output_index=0)
            + self._next("response.incomplete" if length else "response.completed", response=resp)
        )


def full_response(req: SimRequest, plan: Plan, n_tokens: int, cached: int | None) -> bytes:
    """The non-streamed answer of a finished request that produced `n_tokens` tokens."""
    r = min(plan.reasoning, n_tokens)
    output: list[Any] = []
    if r:
        output.append(
            {
                "id": "rs_" + req.request_id,
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": "".join(plan.pieces[:r])}],
            }
        )
    output.append(
        {
            "id": "msg_" + req.request_id,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "".join(plan.pieces[r:n_tokens]), "annotations": []}],
        }
    )
    length = plan.finish_reason == "length"
    obj = _response(
        req,
        int(time.time()),
        "incomplete" if length else "completed",
        output,
        _usage(req.prompt_tokens, n_tokens, r, cached),
        length,
    )
    return json.dumps(obj, separators=(",", ":")).encode()
