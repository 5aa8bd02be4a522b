"""The run of one session graph: which nodes may start now, and what the session came to.

`GraphRun` is the order alone (no clock, no network): `take_ready()` hands out each node whose parents have all
completed, once, in run order; `finish(key, ok)` records its end. A node that fails (a call without an answer,
a wait cut by the run's stop) blocks every node after it: those never start. The session is `completed` when
every node completed, else `cut` (stopped by the run's end, or by a failed call: its finished calls count).
"""

from __future__ import annotations

from vllm_users.workload.session_graph import Node, SessionGraph

__all__ = ["GraphRun"]


class GraphRun:
    """The state of one session graph's run: started, completed and failed nodes."""

    def __init__(self, graph: SessionGraph) -> None:
        self.graph = graph
        self._waiting = {n.key: len(set(n.parents)) for n in graph.nodes}
        self._ready = [n for n in graph.nodes if not n.parents]
        self.started: list[str] = []  # in the order they were handed out
        self.completed: list[str] = []  # in the order they finished
        self.failed: list[str] = []
        self.running: set[str] = set()

    def take_ready(self) -> list[Node]:
        """The nodes that may start now (all parents completed), in run order; each is handed out once."""
        out = sorted(self._ready, key=lambda n: n.order)
        self._ready = []
        for n in out:
            self.started.append(n.key)
            self.running.add(n.key)
        return out

    def finish(self, key: str, ok: bool) -> None:
        """Node `key` ended: completed (`ok`), its children whose parents are now all done become ready; or
        failed, and every node after it stays unstarted."""
        if key not in self.running:
            raise ValueError(f"node {key!r} is not running")
        self.running.discard(key)
        if not ok:
            self.failed.append(key)
            return
        self.completed.append(key)
        for child in self.graph.children.get(key, ()):
            self._waiting[child] -= 1
            if self._waiting[child] == 0:
                self._ready.append(self.graph.node(child))

    @property
    def idle(self) -> bool:
        """Nothing running and nothing ready: the run of this session is over."""
        return not self.running and not self._ready

    @property
    def is_complete(self) -> bool:
        """Every node of the graph completed."""
        return len(self.completed) == len(self.graph.nodes)

    @property
    def outcome(self) -> str:
        """`completed` when every node completed, else `cut` (the run ended or a call failed first)."""
        return "completed" if self.is_complete else "cut"
