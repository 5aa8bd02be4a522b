"""A request trace, whatever file it came from: the requests in send order, each at its offset from the first.

The format readers (`trace_formats/`, one module per format) build a `Trace`; the open-loop schedule sends each `TraceRequest` at
`t0 + offset_s / time_scale`; the trace user builds its prompt (exact lengths, mooncake hash blocks, or the
trace's own text/messages) and, for a session, waits for the earlier turn and the think time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Trace", "TraceRequest"]


@dataclass(slots=True)
class TraceRequest:
    """One request of a trace: when it is sent (seconds from the trace's first request) and what it asks.

    Read-only once `load_trace` returns it; not frozen only because a frozen dataclass takes 4x as long to
    build, and a 1M-line trace builds a million of them."""

    offset_s: float  # from the trace's first request (after --trace-start), before --time-scale
    input_len: int | None = None  # prompt tokens (None: the prompt/messages are given)
    output_len: int | None = None  # max_tokens (None: --output-len)
    prompt: str | None = None  # a completions prompt or one user message
    messages: list[dict[str, Any]] | None = None  # a whole chat history
    hash_ids: tuple[int, ...] = ()  # mooncake: one id per block of --trace-block-size prompt tokens
    session_id: str | None = None  # requests of one session run in turn order on one worker
    turn: int | None = None  # 0-based turn within the session
    think_ms: float | None = None  # pause after the previous turn completed, before this one
    model: str | None = None
    tenant: str | None = None
    priority: int | None = None
    scenario: str | None = None  # records: the scenario that sent it (replayed under the same name)
    endpoint: str | None = None  # chat|completions|responses|embeddings|rerank|score (None: --endpoint)
    images: int | None = None  # image parts on this chat request (None: --images)
    # a session graph's node (graph, cc-traces: workload/session_graph.py); None: a line of a linear session
    node: str | None = None
    parents: tuple[str, ...] = ()  # the nodes of its session that complete before it starts
    kind: str | None = None  # "call" (an LLM call) or "wait" (a tool run, think time); None: a call
    wait_ms: float | None = None  # a wait node's duration
    agent: str | None = None  # the subagent that makes this call (None: the session's main agent)
    context_len: int | None = (
        None  # the call's whole prompt as the trace recorded it (input_len: its new part)
    )
    line: int = 0  # 1-based line (or CSV row) of the file, for error messages


@dataclass(frozen=True)
class Trace:
    """The requests of one trace file, sorted by offset, with what the reader skipped and why."""

    path: str
    format: str  # the name of its format's record (trace_formats/registry.py)
    requests: list[TraceRequest] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rows skipped (burstgpt's failed rows)
    block_size: int = 512  # mooncake: prompt tokens per hash id

    @property
    def calls(self) -> int:
        """The requests that are sent: every one but a session graph's waits."""
        return sum(1 for r in self.requests if r.kind != "wait")

    @property
    def duration_s(self) -> float:
        """Seconds from the first to the last request (before --time-scale)."""
        return self.requests[-1].offset_s - self.requests[0].offset_s if self.requests else 0.0
