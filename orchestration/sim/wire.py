"""Byte layout of vLLM's responses: SSE chunks for chat and completions, and non-streamed bodies.

Chunks are assembled from pre-rendered head/tail strings so a token costs one small json.dumps
(cached for vocabulary words) and a few concatenations.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from typing import Any

from .request import Plan, SimRequest

DONE = b"data: [DONE]\n\n"


@lru_cache(maxsize=8192)
def _q(text: str) -> str:
    """JSON-quote a piece (cached: vocabulary words repeat)."""
    return json.dumps(text)


def usage_dict(prompt: int, completion: int, cached: int | None) -> dict[str, Any]:
    """vLLM's UsageInfo, fields in its order; prompt_tokens_details only when enabled (cached not None)."""
    u: dict[str, Any] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                         "completion_tokens": completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u


class ChunkWriter:
    """Renders the SSE events of one streamed request."""

    def __init__(self, req: SimRequest, plan: Plan, created: int | None = None) -> None:
        self.req = req
        self.plan = plan
        created = int(time.time()) if created is None else created
        model = json.dumps(req.model)
        if req.chat:
            self.head = (f'data: {{"id":"{req.request_id}","object":"chat.completion.chunk",'
                         f'"created":{created},"model":{model},"choices":[')
        else:
            self.head = (f'data: {{"id":"{req.request_id}","object":"text_completion",'
                         f'"created":{created},"model":{model},"choices":[')
        self.prompt_tokens = req.prompt_tokens
        self.cached_tokens: int | None = None

    def _usage_tail(self, completion: int) -> str:
        """The ``,"usage":{...}`` suffix of continuous-usage chunks."""
        return ',"usage":' + json.dumps(usage_dict(self.prompt_tokens, completion, self.cached_tokens),
                                        separators=(",", ":"))

    def role(self) -> str:
        """Chat's first event: the assistant role with empty content."""
        tail = self._usage_tail(0) if self.req.continuous_usage else ""
        return (self.head + '{"index":0,"delta":{"role":"assistant","content":""},'
                '"logprobs":null,"finish_reason":null}]' + tail + "}\n\n")

    def _fin(self, last: bool) -> str:
        """The finish_reason value (plus stop_reason on the last event)."""
        return f'"{self.plan.finish_reason}","stop_reason":null' if last else "null"

    def pieces(self, p0: int, p1: int, n_done: int, last: bool) -> str:
        """One event carrying pieces ``p0:p1``; ``n_done`` tokens have been produced including them."""
        plan = self.plan
        text = _q("".join(plan.pieces[p0:p1]) if p1 - p0 != 1 else plan.pieces[p0])
        if self.req.chat:
            if plan.tool_name is not None:
                delta = '{"tool_calls":[{"index":0,"function":{"arguments":' + text + "}}]}"
            else:
                delta = '{"content":' + text + "}"
            body = '{"index":0,"delta":' + delta + ',"logprobs":null,"finish_reason":' + self._fin(last) + "}]"
        else:
            body = '{"index":0,"text":' + text + ',"logprobs":null,"finish_reason":' + self._fin(last) + "}]"
        tail = self._usage_tail(n_done) if self.req.continuous_usage else ""
        return self.head + body + tail + "}\n\n"

    def tool_header(self, last: bool) -> str:
        """First tool-call event: index, id, type and name with empty arguments."""
        plan = self.plan
        delta = ('{"tool_calls":[{"id":"' + str(plan.tool_id) + '","type":"function","index":0,'
                 '"function":{"name":' + _q(str(plan.tool_name)) + ',"arguments":""}}]}')
        body = '{"index":0,"delta":' + delta + ',"logprobs":null,"finish_reason":' + self._fin(last) + "}]"
        tail = self._usage_tail(1) if self.req.continuous_usage else ""
        return self.head + body + tail + "}\n\n"

    def empty_finish(self) -> str:
        """A finish event that carries no output (zero_tokens fault)."""
        tail = self._usage_tail(0) if self.req.continuous_usage else ""
        if self.req.chat:
            body = '{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":null}]'
        else:
            body = '{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":null}]'
        return self.head + body + tail + "}\n\n"

    def usage(self, completion: int) -> str:
        """The final usage event (``choices: []``), sent only with include_usage."""
        return self.head + "]" + self._usage_tail(completion) + "}\n\n"


def full_response(req: SimRequest, plan: Plan, n_tokens: int, cached: int | None,
                  created: int | None = None) -> bytes:
    """Non-streamed body of a finished request that produced ``n_tokens`` tokens."""
    created = int(time.time()) if created is None else created
    usage = usage_dict(req.prompt_tokens, n_tokens, cached)
    if cached is None:
        usage["prompt_tokens_details"] = None
    finish = plan.finish_reason if n_tokens >= plan.n_tokens else "length"
    n_pieces = n_tokens - 1 if plan.tool_name else n_tokens
    text = "".join(plan.pieces[: max(0, n_pieces)])
    if req.chat:
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None,
                                   "annotations": None, "audio": None, "function_call": None,
                                   "tool_calls": [], "reasoning_content": None}
        if plan.tool_name is not None and n_tokens > 0:
            message["content"] = None
            message["tool_calls"] = [{"id": plan.tool_id, "type": "function",
                                      "function": {"name": plan.tool_name, "arguments": text}}]
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None,
                                  "finish_reason": finish, "stop_reason": None}
        obj = {"id": req.request_id, "object": "chat.completion", "created": created, "model": req.model,
               "choices": [choice], "service_tier": None, "system_fingerprint": None, "usage": usage,
               "prompt_logprobs": None, "kv_transfer_params": None}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish,
                  "stop_reason": None, "prompt_logprobs": None}
        obj = {"id": req.request_id, "object": "text_completion", "created": created, "model": req.model,
               "choices": [choice], "service_tier": None, "system_fingerprint": None, "usage": usage,
               "kv_transfer_params": None}
    return json.dumps(obj, separators=(",", ":")).encode()


def inband_error(message: str = "Simulated in-band error", code: int = 500) -> str:
    """An error event inside a 200 stream, as vLLM sends when generation fails mid-stream."""
    err = {"error": {"message": message, "type": "InternalServerError", "param": None, "code": code}}
    return "data: " + json.dumps(err) + "\n\n"
