"""Running a session graph on a user: each ready node in a greenlet of its own, the histories it builds.

`run_graph` starts every node `GraphRun` hands out (calls and waits of a fork run side by side), then waits
for one to end, until none is running; the run's stop (`stopping`) starts nothing more, and a killed user kills
its nodes (their requests are recorded as interrupted by `LLMUser.send`). `Histories` holds what a call sends:
its base's history, the joined answers and its new text as one user message, and what it leaves behind (the
messages and its answer) for the nodes after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import gevent
import gevent.pool
import gevent.queue

from vllm_users.measure.record import RequestRecord
from vllm_users.scenarios.request_spec import Reply, RequestSpec
from vllm_users.workload.graph_run import GraphRun
from vllm_users.workload.session_graph import Node, SessionGraph
from vllm_users.workload.ticket import Ticket

__all__ = ["Histories", "SessionUser", "mark_node", "node_context", "new_message", "replay", "run_graph"]

Message = dict[str, Any]


def run_graph(
    graph: SessionGraph,
    call: Callable[[Node], bool],
    wait: Callable[[Node], bool],
    stopping: Callable[[], bool],
) -> GraphRun:
    """Run `graph`: `call(node)` for an LLM call, `wait(node)` for a wait, each True when it completed; the
    finished run (its outcome: completed or cut)."""
    run = GraphRun(graph)
    ended: gevent.queue.Queue[tuple[str, bool]] = gevent.queue.Queue()
    group = gevent.pool.Group()

    def one(node: Node) -> None:
        ok = False
        try:
            ok = call(node) if node.is_call else wait(node)
        finally:  # a killed node ends too (not ok): its parent's loop must not wait for it
            ended.put((node.key, ok))

    try:
        while True:
            if not stopping():
                for node in run.take_ready():
                    group.spawn(one, node)
            if not run.running:
                return run
            key, ok = ended.get()
            run.finish(key, ok)
    finally:
        group.kill(block=True, timeout=2)


class SessionUser(Protocol):
    """What a graph replay asks of its user (an `LLMUser`)."""

    def send(self, spec: RequestSpec, ticket: Ticket, scenario: str | None = None) -> Reply: ...

    def think(self, seconds: float) -> bool: ...

    def stopping(self) -> bool: ...


def replay(
    user: SessionUser,
    ticket: Ticket,
    graph: SessionGraph,
    spec_of: Callable[[Node, int, list[Message], list[str]], RequestSpec],
) -> GraphRun:
    """Run a session graph on `user`: `spec_of(node, ticket index, history, joined answers)` builds a call's
    request (its `context["messages"]` what it sends, `context["scenario"]` the record's scenario when not the
    user's), the user sends it and thinks through each wait (False when the run stops first); each answer goes
    into the histories of the nodes after it."""
    histories = Histories()

    def call(node: Node) -> bool:
        spec = spec_of(node, ticket.index, histories.base_of(node), histories.joined(node))
        reply = user.send(spec, ticket, scenario=spec.context.get("scenario"))
        if reply.ok:
            histories.answered(node, spec.context["messages"], reply.text)
        return reply.ok  # no answer to carry on: the nodes after it are not sent (the session is cut)

    def wait(node: Node) -> bool:
        if node.wait_s and not user.think(node.wait_s):
            return False
        histories.passed(node)
        return True

    return run_graph(graph, call, wait, user.stopping)


def new_message(joined: list[str], text: str) -> str:
    """A call's new user message: the answers it joins (subagents' results), then its own new text."""
    return "\n\n".join([*joined, *([text] if text else [])]) or " "


def node_context(node: Node) -> tuple[str, str | None, int]:
    """What a call's spec carries of its node (`context["node"]`): its key, subagent and depth."""
    return (node.key, node.agent or None, node.depth)


def mark_node(context: dict[str, Any], rec: RequestRecord) -> None:
    """A graph call's record names its node, subagent (None: the main agent) and depth in its `extra`."""
    node = context.get("node")
    if node is not None:
        key, agent, depth = node
        rec.extra = {**(rec.extra or {}), "node": key, "agent": agent, "depth": depth}


class Histories:
    """Each finished node's history (the messages it sent and its answer) and last answer, by node key."""

    def __init__(self) -> None:
        self.history: dict[str, list[Message]] = {}
        self.answer: dict[str, str] = {}

    def base_of(self, node: Node) -> list[Message]:
        """The history a node continues: its base's, or none."""
        return list(self.history.get(node.base, ())) if node.base is not None else []

    def joined(self, node: Node) -> list[str]:
        """The answers that open a call's new message: the last answer of each node it joins."""
        return [a for j in node.joins if (a := self.answer.get(j))]

    def passed(self, node: Node) -> None:
        """A wait completed: it hands its base's history and last answer on."""
        self.history[node.key] = self.base_of(node)
        self.answer[node.key] = self.answer.get(node.base, "") if node.base is not None else ""

    def answered(self, node: Node, messages: list[Message], text: str) -> None:
        """A call completed with `text`: its history is what it sent and its answer."""
        self.history[node.key] = [*messages, {"role": "assistant", "content": text}]
        self.answer[node.key] = text
