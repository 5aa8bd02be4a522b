"""A session as a graph: its nodes (LLM calls and waits), the order they may run in, and what each call sends.

A node starts when all its parents have completed. A call continues one history: its `base`, the node whose
history (the messages sent and the answer) it extends, or none (an empty history). A subagent is the calls of
one `agent` id: its first call forks from a node of another agent (its base), so its prompt starts with that
agent's history; a call of an agent whose parent is a node of another agent, past its own first node, is a join:
that node's last answer (the subagent's result) opens the call's new message. A wait (a tool run, think time)
passes its base's history on, and the joins it waited for to the next call.

Each call's new message is `new_len` tokens: the trace's new tokens, or its recorded prompt (`context_len`) less
the history it continues, counted from the trace's own lengths (each earlier call's new tokens and answer). A
call whose recorded prompt is shorter than that history restarts it (a compaction): an empty history and the
whole recorded prompt as its new message. A linear session (the jsonl's `session_id`/`turn`/`think_ms`) is a
graph with one path (`path_graph`). The readers check a graph file whole (`check_nodes`) before any load.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from vllm_users.errors import TraceError
from vllm_users.workload.trace import TraceRequest

__all__ = ["CALL", "WAIT", "Node", "SessionGraph", "check_nodes", "graph_of", "path_graph"]

CALL = "call"
WAIT = "wait"


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a session graph, with what the graph's order makes of it."""

    key: str  # the node's id in its session
    order: int  # its place in the graph's run order (a topological order, the file's where it may)
    turn: int  # a call: its place among the session's calls (the record's turn); a wait: -1
    request: TraceRequest  # the trace's line (a call: its lengths, model, endpoint)
    parents: tuple[str, ...]
    kind: str  # CALL or WAIT
    agent: str  # "" for the session's main agent
    wait_s: float  # a wait's duration (0 for a call)
    base: str | None  # the node whose history this one continues; None: an empty history
    joins: tuple[str, ...]  # the nodes whose last answer opens this call's new message (subagent results)
    new_len: (
        int | None
    )  # tokens of this call's new text; None: the line's own prompt, messages or --input-len
    context_len: int  # tokens this call's prompt holds before its new text, as the trace's lengths count them
    reset: bool  # the recorded prompt is shorter than the history: this call starts a new one
    depth: int  # subagent depth: 0 for the main agent, its fork's depth + 1 for a subagent

    @property
    def is_call(self) -> bool:
        """True for an LLM call, False for a wait."""
        return self.kind == CALL


@dataclass(frozen=True)
class SessionGraph:
    """The nodes of one session in run order, each node's children, and where the nodes came from."""

    session: str
    nodes: tuple[Node, ...]
    children: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def node(self, key: str) -> Node:
        """The node called `key` (KeyError for none)."""
        return self._by_key[key]

    @functools.cached_property
    def _by_key(self) -> dict[str, Node]:
        return {n.key: n for n in self.nodes}  # (cached_property writes the instance dict: frozen or not)

    @property
    def calls(self) -> int:
        """How many LLM calls the session makes."""
        return sum(1 for n in self.nodes if n.is_call)


def _where(path: str, r: TraceRequest) -> str:
    return f"{path}:{r.line}: session {r.session_id!r}, node {r.node!r}"


def check_nodes(requests: Sequence[TraceRequest], path: str) -> None:
    """Every session of a graph trace is a graph: unique node ids, parents among its nodes, no cycle, waits of
    a duration >= 0; one TraceError naming the trace, the session and the node otherwise (exit 2)."""
    sessions: dict[str, list[TraceRequest]] = {}
    for r in requests:
        if r.session_id is None or r.node is None:
            raise TraceError(f"{path}:{r.line}: a graph node needs a session id and a node id")
        sessions.setdefault(r.session_id, []).append(r)
    for rs in sessions.values():
        seen: dict[str, TraceRequest] = {}
        for r in rs:
            if r.node in seen:
                raise TraceError(f"{_where(path, r)}: a second node of that id (line {seen[r.node].line})")
            seen[r.node] = r  # type: ignore[index]  # node is set (checked above)
            if r.kind == WAIT and not (r.wait_ms is not None and r.wait_ms >= 0):
                raise TraceError(f"{_where(path, r)}: a wait of {r.wait_ms} ms (a wait lasts >= 0 ms)")
        for r in rs:
            for p in r.parents:
                if p not in seen:
                    raise TraceError(f"{_where(path, r)}: its parent {p!r} is not a node of the session")
                if p == r.node:
                    raise TraceError(f"{_where(path, r)}: a node cannot be its own parent (a cycle)")
        _topological(rs, path)


def _topological(rs: Sequence[TraceRequest], path: str) -> list[int]:
    """The positions of `rs` in a run order: parents first, else the file's order; a TraceError on a cycle."""
    pos = {r.node: i for i, r in enumerate(rs)}
    waiting = [len(set(r.parents)) for r in rs]
    kids: list[list[int]] = [[] for _ in rs]
    for i, r in enumerate(rs):
        for p in set(r.parents):
            kids[pos[p]].append(i)
    heap = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        i = heapq.heappop(heap)
        out.append(i)
        for k in kids[i]:
            waiting[k] -= 1
            if waiting[k] == 0:
                heapq.heappush(heap, k)
    if len(out) < len(rs):
        stuck = min(i for i, w in enumerate(waiting) if w > 0)
        raise TraceError(f"{_where(path, rs[stuck])}: its parents form a cycle through it")
    return out


def _complete(rs: Sequence[TraceRequest]) -> list[TraceRequest]:
    """The nodes whose parents are all present, transitively (a window or --num-prompts may cut a session)."""
    have: set[str] = set()
    out: list[TraceRequest] = []
    changed = True
    left = list(rs)
    while changed:
        changed = False
        rest = []
        for r in left:
            if all(p in have for p in r.parents):
                have.add(r.node)  # type: ignore[arg-type]  # graph nodes have ids
                out.append(r)
                changed = True
            else:
                rest.append(r)
        left = rest
    kept = {id(r) for r in out}
    return [r for r in rs if id(r) in kept]


def graph_of(requests: Sequence[TraceRequest], path: str = "") -> SessionGraph:
    """The graph of one session's nodes (a graph trace's lines of one session id), with each call's history,
    joins and new length; nodes cut from their parents by the trace's window are left out."""
    rs = _complete(requests)
    if not rs:  # every node cut from its parents: a session with nothing to send
        return SessionGraph(requests[0].session_id or "" if requests else "", ())
    run_order = _topological(rs, path)
    agent = {r.node: r.agent or "" for r in rs}
    built: dict[str, Node] = {}
    after: dict[str, int] = {}  # expected tokens of a node's history once it completed
    last_out: dict[str, int] = {}  # tokens of the last answer in a node's history (what a join adds)
    carry: dict[str, tuple[str, ...]] = {}  # a wait's joins, handed to the call after it
    nodes: list[Node] = []
    calls = 0
    for order, i in enumerate(run_order):
        r = rs[i]
        key: str = r.node  # type: ignore[assignment]  # graph nodes have ids
        mine = agent[key]
        parents = tuple(dict.fromkeys(r.parents))
        same = [p for p in parents if agent[p] == mine]
        cross = [p for p in parents if agent[p] != mine]
        by_history = sorted(same or cross, key=lambda p: (after[p], built[p].order))
        base = by_history[-1] if by_history else None
        joins = tuple(
            dict.fromkeys(
                [j for p in same if built[p].kind == WAIT for j in carry[p]] + [p for p in cross if p != base]
            )
        )
        depth = 0 if base is None else built[base].depth + (agent[base] != mine and not same)
        if r.kind == WAIT:
            wait_s = (r.wait_ms or 0.0) / 1000.0
            carry[key] = joins
            node = Node(key, order, -1, r, parents, WAIT, mine, wait_s, base, (), None, 0, False, depth)
            after[key] = after[base] if base is not None else 0
            last_out[key] = last_out[base] if base is not None else 0
        else:
            joined = sum(last_out[j] for j in joins)
            ctx = (after[base] if base is not None else 0) + joined
            reset = False
            new_len = r.input_len
            if new_len is None and r.context_len is not None:
                new_len = r.context_len - ctx
                if new_len < 1:  # the recorded prompt is shorter than the history: a compaction
                    reset, base, ctx = True, None, joined
                    new_len = max(1, r.context_len - joined)
            out = r.output_len or 0
            node = Node(
                key, order, calls, r, parents, CALL, mine, 0.0, base, joins, new_len, ctx, reset, depth
            )
            calls += 1
            after[key] = ctx + (new_len or 0) + out
            last_out[key] = out
        built[key] = node
        nodes.append(node)
    children: dict[str, list[str]] = {}
    for n in nodes:
        for p in n.parents:
            children.setdefault(p, []).append(n.key)
    sid = rs[0].session_id or ""
    return SessionGraph(sid, tuple(nodes), {k: tuple(v) for k, v in children.items()})


def path_graph(turns: Iterable[TraceRequest]) -> SessionGraph:
    """A linear session as a graph of one path: turn k, after a wait of its think_ms when it has one, after
    turn k-1; each turn's new message is its line's own (its prompt, or input_len tokens)."""
    nodes: list[Node] = []
    before: str | None = None
    sid = ""
    for k, r in enumerate(turns):
        sid = r.session_id or sid
        if k and r.think_ms:
            key = f"wait-{k}"
            nodes.append(
                Node(key, len(nodes), -1, r, (before,) if before else (), WAIT, "", r.think_ms / 1000.0,
                     before, (), None, 0, False, 0)
            )  # fmt: skip
            before = key
        key = f"turn-{k}"
        parents = (before,) if before else ()
        nodes.append(
            Node(key, len(nodes), k, r, parents, CALL, "", 0.0, before, (), r.input_len, 0, False, 0)
        )
        before = key
    children: dict[str, tuple[str, ...]] = {n.parents[0]: (n.key,) for n in nodes if n.parents}
    return SessionGraph(sid, tuple(nodes), children)
