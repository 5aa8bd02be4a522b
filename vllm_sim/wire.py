"""Byte layout of vLLM's responses: SSE chunks for chat and completions, and non-streamed bodies.

Chunks are assembled from pre-rendered head/tail strings so a token costs one small json.dumps
(cached for vocabulary words) and a few concatenations.
"""

from __future__ import annotations

import json
import time
import zlib
from functools import lru_cache
from typing import Any

from .request import Plan, SimRequest

VERSION = "0.32.0"

DONE = b"data: [DONE]\n\n"


@lru_cache(maxsize=8192)
def _q(text: str) -> str:
    """JSON-quote a piece (cached: vocabulary words repeat)."""
    return json.dumps(text)


def fingerprint(model: str) -> str:
    """vLLM 0.32's system_fingerprint shape: ``vllm-<version>-<8 hex>`` (stable per served model)."""
    return f"vllm-{VERSION}-{zlib.crc32(model.encode()):08x}"


def usage_dict(
    prompt: int, completion: int, cached: int | None, details_null: bool = False
) -> dict[str, Any]:
    """vLLM's UsageInfo, fields in its order; prompt_tokens_details only when enabled (cached not None)."""
    u: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    elif details_null:
        u["prompt_tokens_details"] = None
    if details_null:
        u["completion_tokens_details"] = None
    return u


def _compact(obj: Any) -> str:
    """JSON without spaces, as pydantic's model_dump_json writes it."""
    return json.dumps(obj, separators=(",", ":"))


class ChunkWriter:
    """Renders the SSE events of one streamed request, byte for byte like vLLM 0.32."""

    done_event: str | None = "data: [DONE]\n\n"  # the stream's last event (the Responses API has none)

    def __init__(self, req: SimRequest, plan: Plan, created: int | None = None) -> None:
        self.req = req
        self.plan = plan
        created = int(time.time()) if created is None else created
        model = json.dumps(req.model)
        kind = "chat.completion.chunk" if req.chat else "text_completion"
        self.head = (
            f'data: {{"id":"{req.request_id}","object":"{kind}",'
            f'"created":{created},"model":{model},"choices":['
        )
        self.fp = ',"system_fingerprint":"' + fingerprint(req.model) + '"'
        self.prompt_tokens = req.prompt_tokens
        self.cached_tokens: int | None = None

    def _cont_usage(self, completion: int) -> str:
        """The ``,"usage":{...}`` of continuous-usage chunks ("" when not asked for)."""
        if not self.req.continuous_usage:
            return ""
        u = usage_dict(self.prompt_tokens, completion, self.cached_tokens)
        u["completion_tokens_details"] = None
        return ',"usage":' + _compact(u)

    def _end(self, last: bool) -> str:
        """Close an event; the stream's final chunk carries system_fingerprint."""
        return (self.fp + "}\n\n") if last and not self.req.include_usage else "}\n\n"

    def role(self) -> str:
        """Chat's first event: the assistant role with empty content."""
        return (
            self.head + '{"index":0,"delta":{"role":"assistant","content":""},'
            '"logprobs":null,"finish_reason":null}]'
            + self._cont_usage(0)
            + ',"prompt_token_ids":null,"prompt_text":null}\n\n'
        )

    def _fin(self, last: bool) -> str:
        """finish_reason (plus stop_reason on the last event) and token_ids."""
        if last:
            return f'"{self.plan.finish_reason}","stop_reason":null,"token_ids":null}}]'
        return 'null,"token_ids":null}]' if self.req.chat else 'null,"stop_reason":null,"token_ids":null}]'

    def _choice(self, delta: str, last: bool) -> str:
        """A chat choice around a rendered delta."""
        return '{"index":0,"delta":' + delta + ',"logprobs":null,"finish_reason":' + self._fin(last)

    def pieces(self, p0: int, p1: int, n_done: int, last: bool) -> str:
        """One event carrying pieces ``p0:p1``; ``n_done`` tokens have been produced including them."""
        plan = self.plan
        text = _q("".join(plan.pieces[p0:p1]) if p1 - p0 != 1 else plan.pieces[p0])
        if self.req.chat:
            if plan.tool_name is not None:
                body = self._choice(
                    '{"content":null,"tool_calls":[{"index":0,"function":{"arguments":' + text + "}}]}", last
                )
            elif p0 < plan.reasoning:  # thinking first (--reasoning-tokens); an event across the end has both
                r = min(p1, plan.reasoning)
                delta = '{"' + plan.reasoning_key + '":' + _q("".join(plan.pieces[p0:r]))
                if p1 > r:
                    delta += ',"content":' + _q("".join(plan.pieces[r:p1]))
                body = self._choice(delta + "}", last)
            else:
                body = self._choice('{"content":' + text + "}", last)
        else:
            body = (
                '{"index":0,"text":'
                + text
                + ',"logprobs":null,"finish_reason":'
                + (f'"{plan.finish_reason}"' if last else "null")
                + ',"stop_reason":null,"prompt_token_ids":null,"token_ids":null}]'
            )
        return self.head + body + self._cont_usage(n_done) + self._end(last)

    def tool_header(self, last: bool) -> str:
        """First tool-call event: index, id, type and the function name."""
        plan = self.plan
        delta = (
            '{"content":null,"tool_calls":[{"id":"' + str(plan.tool_id) + '","type":"function",'
            '"index":0,"function":{"name":' + _q(str(plan.tool_name)) + "}}]}"
        )
        return self.head + self._choice(delta, last) + self._cont_usage(1) + self._end(last)

    def empty_finish(self) -> str:
        """A finish event that carries no output (zero_tokens fault)."""
        if self.req.chat:
            body = '{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]'
        else:
            body = (
                '{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":null,'
                '"prompt_token_ids":null,"token_ids":null}]'
            )
        return self.head + body + self._cont_usage(0) + self._end(True)

    def usage(self, completion: int) -> str:
        """The final usage event (``choices: []``), sent only with include_usage."""
        u = usage_dict(self.prompt_tokens, completion, self.cached_tokens)
        if self.plan.reasoning:
            u["completion_tokens_details"] = {"reasoning_tokens": min(self.plan.reasoning, completion)}
        return self.head + '],"usage":' + _compact(u) + self.fp + "}\n\n"


def full_response(
    req: SimRequest, plan: Plan, n_tokens: int, cached: int | None, created: int | None = None
) -> bytes:
    """Non-streamed body of a finished request that produced ``n_tokens`` tokens."""
    created = int(time.time()) if created is None else created
    usage = usage_dict(req.prompt_tokens, n_tokens, cached, details_null=True)
    finish = plan.finish_reason if n_tokens >= plan.n_tokens else "length"
    n_pieces = n_tokens - 1 if plan.tool_name else n_tokens
    r = min(plan.reasoning, n_pieces)
    thought = "".join(plan.pieces[:r]) if r else None
    text = "".join(plan.pieces[r : max(0, n_pieces)])
    if r:
        usage["completion_tokens_details"] = {"reasoning_tokens": r}
    fp = fingerprint(req.model)
    if req.chat:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
        }
        if plan.tool_name is not None and n_tokens > 0:
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": plan.tool_id,
                    "type": "function",
                    "function": {"name": plan.tool_name, "arguments": text},
                }
            ]
        message["reasoning"] = None
        if thought is not None:
            message[plan.reasoning_key] = thought
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
            "token_ids": None,
            "routed_experts": None,
        }
        obj = {
            "id": req.request_id,
            "object": "chat.completion",
            "created": created,
            "model": req.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": fp,
            "usage": usage,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
            "token_ids": None,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "routed_experts": None,
        }
        obj = {
            "id": req.request_id,
            "object": "text_completion",
            "created": created,
            "model": req.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": fp,
            "usage": usage,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": None,
        }
    return _compact(obj).encode()


def inband_error(message: str = "Simulated in-band error", code: int = 500) -> str:
    """An error event inside a 200 stream, as vLLM sends when generation fails mid-stream."""
    err = {"error": {"message": message, "type": "InternalServerError", "param": None, "code": code}}
    return "data: " + json.dumps(err) + "\n\n"
