"""One in-flight request: turns "n more tokens are ready" into bytes on its connection, faults included."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from . import wire
from .faults import Fault
from .metrics import SimStats
from .request import Plan, SimRequest
from .responses import ResponsesWriter
from .responses import full_response as responses_full

if TYPE_CHECKING:
    from .http import Connection


def _framed(events: list[str]) -> bytes:
    """Each SSE event in its own HTTP chunk (as uvicorn sends them), all in one buffer for one write."""
    return b"".join(b"%x\r\n%s\r\n" % (len(b), b) for b in (e.encode() for e in events))


class Status(Enum):
    """What the engine should do with a stream after produce()."""

    CONTINUE = 0
    FINISHED = 1  # response complete (or closed by a fault): forget it
    STALLED = 2  # a stall fault struck: resume at ``stalled_until``
    HUNG = 3  # produces nothing more, but the connection stays open


class Stream:
    """Per-request output state shared by both engines."""

    __slots__ = (
        "conn",
        "req",
        "plan",
        "stats",
        "fault",
        "writer",
        "total",
        "done",
        "arrival",
        "first_at",
        "last_at",
        "cancelled",
        "cached_tokens",
        "stalled_until",
        "stall_ms",
        "shift",
        "writes",
        "heap_key",
        "replica",
        "headers",
        "_cached_field",
    )

    def __init__(
        self,
        conn: Connection,
        req: SimRequest,
        plan: Plan,
        stats: SimStats,
        fault: Fault | None,
        arrival: float,
        report_cached: bool,
    ) -> None:
        self.conn = conn
        self.req = req
        self.plan = plan
        self.stats = stats
        self.fault = fault
        writer = ResponsesWriter if req.api == "responses" else wire.ChunkWriter
        self.writer: wire.ChunkWriter | ResponsesWriter | None = writer(req, plan) if req.stream else None
        self.total = plan.n_tokens
        self.done = 0
        self.arrival = arrival
        self.first_at = 0.0
        self.last_at = 0.0
        self.cancelled = False
        self.cached_tokens = 0
        self._cached_field = report_cached
        self.stalled_until = 0.0
        self.stall_ms = 0.0
        self.shift = 0.0  # fixed mode: seconds of stall added to every later deadline
        self.writes = 0  # fixed mode: writes done
        self.heap_key = 0
        self.replica = -1  # --replicas: the replica serving it (-1: one engine)
        self.headers: list[tuple[str, str]] | None = None  # extra response headers (x-sim-replica)
        conn.stream = self

    def cancel(self) -> None:
        """The client went away: the engine drops the stream at its next look."""
        self.cancelled = True

    def set_cached(self, tokens: int) -> None:
        """Record the prefix-cache hit (shown in usage when prompt token details are enabled)."""
        self.cached_tokens = tokens
        if self.writer is not None and self._cached_field:
            self.writer.cached_tokens = tokens

    def _count_fault(self) -> None:
        """Count the fault as injected (exactly once) and forget it."""
        assert self.fault is not None
        self.stats.faults[self.fault.kind] += 1
        self.fault = None

    def produce(self, n: int, now: float, per_event: int = 1) -> Status:
        """Make the next ``n`` tokens ready at ``now`` and write them (events of ``per_event`` tokens)."""
        if self.cancelled or self.conn.closed:
            return Status.FINISHED
        fault = self.fault
        if fault is not None:
            if fault.kind in ("usage_only", "zero_tokens"):
                return self._special_end(now)
            if self.done + n >= fault.after and fault.after < self.total:
                n = fault.after - self.done
            else:
                fault = None
        n = min(n, self.total - self.done)
        out: list[str] = []
        if n > 0:
            self._account(n, now)
            if self.writer is not None:
                out = self._events(n, per_event)
            self.done += n
        if fault is not None:
            return self._strike(fault, out, now)
        if self.done >= self.total:
            self._finish(out, now)
            return Status.FINISHED
        if out:
            self.conn.write_raw(_framed(out))
        return Status.CONTINUE

    def _account(self, n: int, now: float) -> None:
        """Token counters and latency histograms for n tokens ready at ``now``."""
        st = self.stats
        st.generation_tokens += n
        if self.done == 0:
            self.first_at = now
            st.ttft.observe(now - self.arrival)
        else:
            st.itl.observe(now - self.last_at)
        self.last_at = now

    def _events(self, n: int, per_event: int) -> list[str]:
        """SSE events for tokens done..done+n (the role chunk goes before the first)."""
        w = self.writer
        assert w is not None
        out = []
        j = self.done
        end = j + n
        off = 0
        if self.req.chat:
            if j == 0:
                out.append(w.role())
            if self.plan.tool_name is not None:
                off = 1
                if j == 0:
                    out.append(w.tool_header(self.total == 1))
                    j = 1
        while j < end:
            k = min(end, j + per_event)
            out.append(w.pieces(j - off, k - off, k, k == self.total))
            j = k
        return out

    def _finish(self, out: list[str], now: float) -> None:
        """Complete the response: usage chunk, [DONE], end of body; record the request's metrics."""
        st = self.stats
        st.e2e.observe(now - self.arrival)
        st.success[self.plan.finish_reason] += 1
        st.served += 1
        st.by_status[200] += 1
        if self.writer is not None:
            if self.req.include_usage:
                out.append(self.writer.usage(self.done))
            if self.writer.done_event:
                out.append(self.writer.done_event)
            self.conn.end_stream(_framed(out))
        else:
            cached = self.cached_tokens if self._cached_field else None
            full = responses_full if self.req.api == "responses" else wire.full_response
            self.conn.respond(200, full(self.req, self.plan, self.done, cached), headers=self.headers)

    def _special_end(self, now: float) -> Status:
        """usage_only / zero_tokens: a stream without content, then [DONE]."""
        assert self.fault is not None
        kind = self.fault.kind
        self._count_fault()
        self.stats.success["stop"] += 1  # finished by the engine, with nothing to say
        self.stats.served += 1
        self.stats.by_status[200] += 1
        if self.writer is None:
            self.plan = Plan([], "stop")
            self.conn.respond(200, wire.full_response(self.req, self.plan, 0, None), headers=self.headers)
            return Status.FINISHED
        parts = []
        if kind == "zero_tokens":
            if self.req.chat:
                parts.append(self.writer.role())
            parts.append(self.writer.empty_finish())
            if self.req.include_usage:
                parts.append(self.writer.usage(0))
        else:
            parts.append(self.writer.usage(0))
        if self.writer.done_event:
            parts.append(self.writer.done_event)
        self.conn.end_stream(_framed(parts))
        return Status.FINISHED

    def _strike(self, fault: Fault, out: list[str], now: float) -> Status:
        """Apply a mid-stream fault after the tokens in ``out``."""
        conn = self.conn
        kind = fault.kind
        self._count_fault()
        data = _framed(out)
        if kind == "stall":
            if data:
                conn.write_raw(data)
            self.stalled_until = now + fault.ms / 1000.0
            self.stall_ms = fault.ms
            return Status.STALLED
        if kind == "hang":
            if data:
                conn.write_raw(data)
            return Status.HUNG
        if kind == "inband_error":
            self.stats.success["error"] += 1  # vLLM counts an engine-side error under finished_reason="error"
            self.stats.served += 1
            self.stats.by_status[200] += 1
            if self.writer is None:
                conn.respond(500, wire.inband_error()[6:-2].encode(), headers=self.headers)
            else:
                conn.end_stream(
                    data + _framed([wire.inband_error(), *filter(None, [self.writer.done_event])])
                )
            return Status.FINISHED
        if kind == "torn" and self.writer is not None:
            line = self.writer.head
            data += _framed([line[: len(line) // 2]])
        if data:
            conn.write_raw(data)
        if kind == "reset":
            conn.reset()
        else:  # close, torn
            conn.close()
        return Status.FINISHED
