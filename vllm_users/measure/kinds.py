"""The names a record and a result carry, written down once: the APIs a request goes to, the error kinds
a failed request gets, and the kinds of request a metric applies to (docs/failure_kinds.md explains each
error kind). Types only: nothing here runs per chunk."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "APIS",
    "Api",
    "ERROR_KINDS",
    "ErrorKind",
    "GENERATIVE_APIS",
    "GenerativeApi",
    "POOLING_ENDPOINTS",
    "PoolingApi",
    "REQUEST_KINDS",
    "RequestKind",
]

GenerativeApi = Literal["chat", "completions", "responses"]
# endpoints whose answer is one JSON body with no output tokens: the pooling models' APIs
PoolingApi = Literal["embeddings", "rerank", "score"]
Api = Literal[GenerativeApi, PoolingApi]
GENERATIVE_APIS: tuple[GenerativeApi, ...] = get_args(GenerativeApi)
POOLING_ENDPOINTS: tuple[PoolingApi, ...] = get_args(PoolingApi)
APIS: tuple[Api, ...] = (*GENERATIVE_APIS, *POOLING_ENDPOINTS)

ErrorKind = Literal[
    "http",  # non-2xx status (status field holds the code)
    "connection",  # connect refused/reset before or during the request
    "timeout",  # connect or read timeout
    "request_timeout",  # --request-timeout: the whole request took longer
    "stall_timeout",  # --stall-timeout: no output chunk for that long (pings and comments do not count)
    "truncated",  # stream ended without [DONE] / torn line
    "inband_error",  # an {"error": ...} event inside a 200 stream
    "no_output",  # stream finished without any output-carrying chunk (e.g. zero tokens)
    "usage_only",  # stream carried a usage chunk and nothing else
    "bad_response",  # not SSE / not OpenAI-shaped (e.g. HTML page)
    "invalid_json",  # json scenario: output does not parse or does not match the schema
    "invalid_tool_call",  # tools scenario: tool call missing, unknown name or bad arguments
    "interrupted",  # stopped by the run ending (Ctrl-C, stop timeout) while streaming
    "dropped",  # open loop: scheduled but never sent (never becomes a request to the server)
]
ERROR_KINDS: tuple[ErrorKind, ...] = get_args(ErrorKind)

# What a metric applies to: a streamed generative answer (chunks: TTFT, ITL, TPOT), a generative answer read as
# one body (output tokens, E2EL only) and a pooling answer (embeddings/rerank/score: no output at all).
RequestKind = Literal["streamed", "not_streamed", "pooling"]
REQUEST_KINDS: tuple[RequestKind, ...] = get_args(RequestKind)
