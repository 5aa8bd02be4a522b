"""``--api-server-count N``: the API-server processes in front of an engine, each one single-threaded queue.

On a fast GPU the engine is not always what a client waits for: vLLM's API server (HTTP, the chat template,
tokenizing, detokenizing, SSE framing) runs one event loop per process, and at high concurrency requests and output
chunks queue for its CPU. Each process here is a single server, first come first served, on virtual time: a job
that arrives at ``t`` starts at ``max(t, when the process is free)`` and ends its cost later. A request costs
``--api-request-cost-us`` + ``--api-prompt-token-cost-us`` × its prompt tokens before it reaches the engine; every
output write (a streamed chunk, the last one, a whole non-streamed answer) costs ``--api-chunk-cost-us`` before it
is written. Jobs wait in one heap under one timer (hrtimer.py), like the fixed engine's writes: no task, thread or
timer per request, nothing runs while nothing is due. A request keeps its process for its whole life (vLLM's
processes each own their connections); requests go to a replica's processes round-robin.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .config import SimConfig
from .hrtimer import EarliestDeadline

if TYPE_CHECKING:
    from .http import Connection

log = logging.getLogger("vllm_sim")

__all__ = ["ApiConn", "ApiStage"]


class ApiStage:
    """Every API-server process of every replica (``groups``): FIFO single servers sharing one timer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cfg: SimConfig, groups: int = 1) -> None:
        self.loop = loop
        self.per_group = cfg.api_server_count
        self.free_at = [0.0] * (self.per_group * groups)  # loop time each process finishes its queued work
        self.busy_s = [0.0] * (self.per_group * groups)  # CPU seconds each process has been given
        self._rr = [0] * groups
        self.request_s = cfg.api_request_cost_us / 1e6
        self.token_s = cfg.api_prompt_token_cost_us / 1e6
        self.chunk_s = cfg.api_chunk_cost_us / 1e6
        self.heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.counter = 0
        self.timer = EarliestDeadline(loop, self._fire)

    def process_for(self, group: int = 0) -> int:
        """The process a new request of replica ``group`` goes to (round-robin among the replica's)."""
        k = self._rr[group]
        self._rr[group] = (k + 1) % self.per_group
        return group * self.per_group + k

    def after(self, p: int, cost_s: float, fn: Callable[..., None], *args: Any) -> float:
        """Queue a job of ``cost_s`` on process ``p``; ``fn(*args)`` runs when it is done (returned: that time)."""
        now = self.loop.time()
        free = self.free_at[p]
        done = (free if free > now else now) + cost_s
        self.free_at[p] = done
        self.busy_s[p] += cost_s
        self.counter += 1
        heapq.heappush(self.heap, (done, self.counter, fn, args))
        self.timer.wake_by(self.heap[0][0])
        return done

    def request(self, p: int, prompt_tokens: int, fn: Callable[..., None], *args: Any) -> float:
        """Queue a request's own work (parse, template, tokenize) on process ``p``; ``fn(*args)`` when done."""
        return self.after(p, self.request_s + self.token_s * prompt_tokens, fn, *args)

    def _fire(self) -> None:
        """Run every job done by now (coalesced), then re-arm."""
        horizon = self.loop.time() + self.timer.coalesce
        heap = self.heap
        while heap and heap[0][0] <= horizon:
            _, _, fn, args = heapq.heappop(heap)
            try:
                fn(*args)
            except Exception:  # one job's failure must not stop the others' (nor the timer)
                log.exception("API-server job failed")
        if heap:
            self.timer.wake_by(heap[0][0])


class ApiConn:
    """A client connection seen through its API-server process: each write waits its turn there and costs a
    chunk's CPU, in order; what the engine reads (``closed``) is the connection's own."""

    __slots__ = ("conn", "stage", "p")

    def __init__(self, conn: Connection, stage: ApiStage, p: int) -> None:
        self.conn = conn
        self.stage = stage
        self.p = p

    @property
    def closed(self) -> bool:
        """Whether the client connection is closed."""
        return self.conn.closed

    @property
    def stream(self) -> object | None:
        """The stream the connection cancels when its client goes away."""
        return self.conn.stream

    @stream.setter
    def stream(self, value: object | None) -> None:
        self.conn.stream = value

    def write_raw(self, data: bytes) -> None:
        """An output chunk: written once the process has detokenized and framed it."""
        self.stage.after(self.p, self.stage.chunk_s, self.conn.write_raw, data)

    def end_stream(self, framed: bytes = b"") -> None:
        """The last chunks and the end of the body, through the process."""
        self.stage.after(self.p, self.stage.chunk_s, self.conn.end_stream, framed)

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
        vary: bool = True,
    ) -> None:
        """A whole response (non-streamed answer, or an error from the engine), through the process."""
        self.stage.after(
            self.p, self.stage.chunk_s, self.conn.respond, status, body, content_type, headers, vary
        )

    def close(self) -> None:
        """Close after the writes queued before it (a fault's cut comes after its tokens)."""
        self.stage.after(self.p, 0.0, self.conn.close)

    def reset(self) -> None:
        """Reset after the writes queued before it."""
        self.stage.after(self.p, 0.0, self.conn.reset)
