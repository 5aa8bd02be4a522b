"""`cc-traces`: recorded coding-agent sessions (the Weka KV-cache-tester corpus that SemiAnalysis publishes as
`cc-traces-weka-*`, with or without subagents), each session one JSON object, read as a session graph.

A trace object holds `id` and `requests`: calls (`type` "n" or "s": `t`, `in`, `out`, `think_time`,
`api_time`) in order, and subagent markers (`type` "subagent": `agent_id`, `status`, its own `requests`, which
may hold markers again). The main agent's calls form one chain; a subagent forks from the call before its
marker and, unless it was launched in the background (`status` "async_launched"), joins the call after it.
A `think_time` before a call is a wait node. docs/traces.md lists every field read and what is left.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from typing import Any

from vllm_users.errors import TraceError
from vllm_users.workload.session_graph import CALL, WAIT, check_nodes
from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_formats._fields import json_lines
from vllm_users.workload.trace_formats.registry import Rows, Sniff, TraceFormat

__all__ = ["FORMAT", "read_cc_traces"]

CALLS = ("n", "s")  # a normal and a streamed call: replayed alike (streaming is the run's --no-stream)
SUBAGENT = "subagent"
BACKGROUND = "async_launched"  # a subagent the parent did not wait for: it joins nothing


def _files(path: str) -> list[str]:
    if not os.path.isdir(path):
        return [path]
    names = sorted(n for n in os.listdir(path) if n.endswith((".json", ".jsonl")))
    if not names:
        raise TraceError(f"{path}: a directory without .json trace files")
    return [os.path.join(path, n) for n in names]


def _objects(file: str) -> list[tuple[int, dict[str, Any]]]:
    """(line, trace object) of a file: one JSON object (possibly over many lines) or one a line."""
    with open(file, encoding="utf-8-sig") as fh:
        text = fh.read()
    try:
        whole = json.loads(text)
    except ValueError:
        return list(json_lines(file))  # JSON lines: one trace a line (its errors name the line)
    if type(whole) is not dict:
        raise TraceError(f"{file}: expected a trace object (with 'requests'), got {type(whole).__name__}")
    return [(1, whole)]


class _Session:
    """One trace object turned into graph nodes; every error names the file, the session and the request."""

    def __init__(self, file: str, line: int, sid: str, out: list[TraceRequest]) -> None:
        self.file, self.line, self.sid, self.out = file, line, sid, out
        self.keys = 0
        self.agents: set[str] = set()

    def error(self, where: str, name: str, expected: str, value: Any) -> TraceError:
        return TraceError(
            f"{self.file}:{self.line}: session {self.sid!r}, node {where}: field '{name}': expected "
            f"{expected}, got {json.dumps(value)[:60]}"
        )

    def _count(self, d: dict[str, Any], name: str, where: str, least: int) -> int:
        v = d.get(name)
        if type(v) is not int or v < least:
            raise self.error(where, name, f"an integer >= {least}", v)
        return v

    def _seconds(self, d: dict[str, Any], name: str, where: str) -> float | None:
        v = d.get(name)
        if v is None:
            return None
        if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
            raise self.error(where, name, "a number of seconds >= 0", v)
        return float(v)

    def _node(self, kind: str, parents: list[str], agent: str | None, **kw: Any) -> str:
        key = f"{agent or 'main'}/{self.keys}"
        self.keys += 1
        self.out.append(
            TraceRequest(
                0.0,
                session_id=self.sid,
                node=key,
                parents=tuple(parents),
                kind=kind,
                agent=agent,
                line=self.line,
                **kw,
            )
        )
        return key

    def chain(self, requests: Any, agent: str | None, fork: str | None, where: str) -> str | None:
        """The nodes of one agent's `requests`, its first after `fork`; the key of its last call."""
        if type(requests) is not list:
            raise self.error(where, "requests", "a list", requests)
        prev = fork
        joins: list[str] = []  # subagents that end before the next call: it waits for them
        end: tuple[float, float] | None = None  # the previous call's t and api_time
        for i, item in enumerate(requests):
            at = f"{where}[{i}]"
            if type(item) is not dict:
                raise self.error(at, "type", "a request object", item)
            kind = item.get("type")
            if kind == SUBAGENT:
                name = item.get("agent_id")
                if type(name) is not str or not name:
                    raise self.error(at, "agent_id", "a non-empty string", name)
                agent_id = name
                k = 2
                while agent_id in self.agents:  # one id per subagent of the session
                    agent_id, k = f"{name}#{k}", k + 1
                self.agents.add(agent_id)
                last = self.chain(item.get("requests"), agent_id, prev, f"{at}.requests")
                if last is not None and item.get("status") != BACKGROUND:
                    joins.append(last)
                continue
            if kind not in CALLS:
                raise self.error(at, "type", '"n", "s" or "subagent"', kind)
            context = self._count(item, "in", at, 0)
            output = self._count(item, "out", at, 0)
            t = self._seconds(item, "t", at)
            think = self._seconds(item, "think_time", at)
            if think is None and end is not None and t is not None:
                think = max(0.0, t - end[0] - end[1])  # the recorded gap less the server's time
            parents = ([prev] if prev else []) + joins
            if think:
                parents = [self._node(WAIT, parents, agent, wait_ms=think * 1000.0)]
            prev = self._node(CALL, parents, agent, context_len=max(1, context), output_len=max(1, output))
            joins = []
            api = self._seconds(item, "api_time", at)
            end = (t, api) if t is not None and api is not None else None
        if joins:  # subagents after the agent's last call: its last node waits for them
            prev = self._node(WAIT, ([prev] if prev else []) + joins, agent, wait_ms=0.0)
        return prev


def read_cc_traces(path: str, unit_s: float) -> Rows:
    """Every trace object of `path` (a .json file, JSON lines of them, or a directory of .json files) as a
    session graph; a session starts at its first request's `t`."""
    out: list[TraceRequest] = []
    seen: Counter[str] = Counter()
    for file in _files(path):
        for line, d in _objects(file):
            sid = d.get("id")
            if type(sid) not in (str, int) or sid == "":
                raise TraceError(f"{file}:{line}: field 'id': expected a trace id, got {sid!r}")
            sid = str(sid)
            seen[sid] += 1
            if seen[sid] > 1:  # the same trace twice (a corpus and its copy): two sessions
                sid = f"{sid}#{seen[sid]}"
            first = len(out)
            session = _Session(file, line, sid, out)
            session.chain(d.get("requests"), None, None, "requests")
            if len(out) == first:
                raise TraceError(f"{file}:{line}: session {sid!r}: no requests")
            starts = [r["t"] for r in d["requests"] if type(r) is dict and type(r.get("t")) in (int, float)]
            t0 = float(min(starts)) if starts else 0.0
            for k, r in enumerate(out[first:]):
                r.offset_s, r.turn = t0, k
    check_nodes(out, path)
    return out, Counter()


def _detect(s: Sniff) -> bool:
    if s.is_dir:
        names = os.listdir(s.path)
        return any(n.endswith(".json") for n in names) and not any(n.endswith("records.jsonl") for n in names)
    if s.has_keys("id", "requests"):
        return True
    if not s.path.endswith(".json") or not s.first_line.startswith("{"):
        return False
    with open(s.path, encoding="utf-8-sig") as fh:  # a pretty-printed object: its keys are further down
        head = fh.read(65536)
    return '"requests"' in head and ('"block_size"' in head or '"hash_id_scope"' in head)


FORMAT = TraceFormat(
    name="cc-traces",
    read=read_cc_traces,
    rank=35,
    summary="recorded coding-agent sessions (`semianalysisai/cc-traces-weka-*`, Weka's `kv-cache-tester`), "
    "with or without subagents: one JSON object a session, replayed as its graph (docs/agents.md)",
    timestamp="seconds in `t` (a session starts at its first)",
    detected_by="a directory of `.json` files; a file whose object has `id` and `requests`",
    detect=_detect,
)
