"""What a scenario sends and gets back: `RequestSpec` (path, body, what the scenario needs back), `Reply` (one
request's result and record), `RequestFailure`, and the Responses API's form of a chat or completions body."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_users.client.stream import StreamResult
from vllm_users.measure.record import RequestRecord

__all__ = ["Reply", "RequestFailure", "RequestSpec", "responses_body"]


class RequestFailure(Exception):
    """Reported to Locust as the failure of a request; the message is the error kind and detail."""


@dataclass(slots=True)
class RequestSpec:
    """What to send: path, JSON body, and what the scenario needs back."""

    body: dict[str, Any]
    chat: bool = True
    want_text: bool = False
    input_len: int | None = None
    output_len: int | None = None
    turn: int | None = None  # None: the request's position in its ticket's session (0, 1, ...)
    session: int | None = None  # None: the ticket's index (a session spanning tickets names its first one)
    context: dict[str, Any] = field(default_factory=dict)
    endpoint: str | None = None  # None: chat or completions by `chat`; else responses|embeddings|rerank|score
    request_class: str | None = None  # the traffic class the request belongs to, kept in its record
    affinity: str | None = (
        None  # --endpoint-policy session: requests with one key go to one endpoint (a prefix chain)
    )


def responses_body(body: dict[str, Any]) -> dict[str, Any]:
    """A chat or completions body (sampling_params + messages or prompt) as a `/v1/responses` one: `input` (the
    messages, or the prompt text), `max_output_tokens`; no stream_options (the Responses API always ends with
    usage, in `response.completed`)."""
    out = {k: v for k, v in body.items() if k not in ("messages", "prompt", "max_tokens", "stream_options")}
    out["input"] = body["messages"] if "messages" in body else body.get("prompt", "")
    if "max_tokens" in body:
        out["max_output_tokens"] = body["max_tokens"]
    return out


@dataclass(slots=True)
class Reply:
    """What one request of a session gave: the stream's result and the request's record."""

    result: StreamResult
    record: RequestRecord

    @property
    def ok(self) -> bool:
        """True when the request succeeded (and passed the scenario's check)."""
        return self.record.error is None

    @property
    def text(self) -> str:
        """The answer's text (the spec must ask for it with want_text=True)."""
        return self.result.text
