"""`graph`: our session-graph JSON lines, one node a line (docs/traces.md, docs/agents.md).

A node is an LLM call or a wait, in a session, with the nodes it waits for (`parents`) and, for a subagent's
call, the subagent's id. The session starts at the least `timestamp` of its lines (0 when none gives one); its
nodes then run by the graph (`workload/session_graph.py`), not by their own timestamps.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from vllm_users.errors import TraceError
from vllm_users.workload.session_graph import CALL, WAIT, check_nodes
from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_formats._fields import json_lines, missing, text_field
from vllm_users.workload.trace_formats.registry import Rows, Sniff, TraceFormat

__all__ = ["FORMAT", "read_graph"]

_KINDS = (CALL, WAIT)


def _id(d: dict[str, Any], name: str, path: str, n: int) -> str:
    v = d.get(name)
    if v is None:
        raise missing(path, n, name)
    if type(v) not in (str, int) or v == "":
        raise TraceError(f"{path}:{n}: field '{name}': expected a string or an integer, got {v!r}")
    return str(v)


class _Line:
    """One line's fields, each error naming the trace, the line, the session and the node."""

    def __init__(self, d: dict[str, Any], path: str, n: int) -> None:
        self.d, self.path, self.n = d, path, n
        self.sid = _id(d, "session_id", path, n)
        self.node = _id(d, "node", path, n)

    def error(self, name: str, expected: str, value: Any) -> TraceError:
        return TraceError(
            f"{self.path}:{self.n}: session {self.sid!r}, node {self.node!r}: field '{name}': "
            f"expected {expected}, got {value!r}"
        )

    def tokens(self, name: str, least: int) -> int | None:
        v = self.d.get(name)
        if v is None:
            return None
        if type(v) is not int or v < least:
            raise self.error(name, f"an integer >= {least}", v)
        return v

    def number(self, name: str) -> float | None:
        v = self.d.get(name)
        if v is None:
            return None
        if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
            raise self.error(name, "a number >= 0", v)
        return float(v)

    def parents(self) -> tuple[str, ...]:
        v = self.d.get("parents", [])
        if type(v) is not list or any(type(p) not in (str, int) for p in v):
            raise self.error("parents", "a list of node ids", v)
        return tuple(str(p) for p in v)


def read_graph(path: str, unit_s: float) -> Rows:
    """Our graph JSON lines: `session_id`, `node`, `parents`, `kind` (call|wait), `wait_ms`, `input_tokens`
    (the call's whole prompt), `new_tokens` (its new part), `output_tokens`, `subagent`, `timestamp`, `model`."""
    out: list[TraceRequest] = []
    start: dict[str, float] = {}
    for n, d in json_lines(path):
        line = _Line(d, path, n)
        kind = d.get("kind", CALL)
        if kind not in _KINDS:
            raise line.error("kind", "call or wait", kind)
        t = line.number("timestamp")
        if t is not None:
            start[line.sid] = min(start.get(line.sid, math.inf), t * unit_s)
        agent = d.get("subagent")
        if agent is not None and (type(agent) not in (str, int) or agent == ""):
            raise line.error("subagent", "a string or an integer", agent)
        context = line.tokens("input_tokens", 1)
        new = line.tokens("new_tokens", 1)
        output = line.tokens("output_tokens", 1)
        wait = None
        if kind == WAIT:
            w: Any = d.get("wait_ms")
            if type(w) not in (int, float) or not math.isfinite(w) or w < 0:
                raise line.error("wait_ms", "a number >= 0 (a wait's duration)", w)
            wait = float(w)
            if context is not None or new is not None or output is not None:
                raise line.error("kind", "a call (a wait has no tokens)", kind)
        elif d.get("wait_ms") is not None:
            raise line.error("kind", "wait (only a wait has a 'wait_ms')", kind)
        elif context is None and new is None:
            raise TraceError(
                f"{path}:{n}: session {line.sid!r}, node {line.node!r}: a call needs 'input_tokens' "
                "or 'new_tokens'"
            )
        out.append(
            TraceRequest(
                0.0,
                input_len=new,
                output_len=output,
                session_id=line.sid,
                model=text_field(d, "model", path, n),
                node=line.node,
                parents=line.parents(),
                kind=kind,
                wait_ms=wait,
                agent=None if agent is None else str(agent),
                context_len=context,
                line=n,
            )
        )
    check_nodes(out, path)
    turns: Counter[str] = Counter()
    for r in out:  # a session's nodes start together, at its start, in the file's order (its turns)
        sid = r.session_id or ""
        r.offset_s = start.get(sid, 0.0)
        r.turn = turns[sid]
        turns[sid] += 1
    return out, Counter()


def _detect(s: Sniff) -> bool:
    return s.has_keys("session_id", "node")


FORMAT = TraceFormat(
    name="graph",
    read=read_graph,
    rank=36,
    summary="our session graphs: one node (an LLM call or a wait) a line, its parents, subagents (docs/agents.md)",
    timestamp="seconds in `timestamp`: a session's start",
    detected_by="JSON lines with `session_id` and `node`",
    detect=_detect,
)
