"""The agent scenario (`--scenario agent`): each ticket is one synthetic agent session, run as its graph.

The session's graph comes from `workload/synthetic_agents.py` (seeded by --seed and the ticket's index, so a
run is the same sessions whoever runs them); it is replayed as a trace's graph is (`session_runner.replay`):
each call its agent's history and one new user message of random text at its exact length (the run's length
model, or --tokenizer), subagents forked from their parent's history and joined by its next call, tool waits
between calls. Each call is one record, linked by `session` (the ticket) and `turn` (its place in the run order).
"""

from __future__ import annotations

from typing import Any

from vllm_users.client.stream import StreamResult
from vllm_users.measure.record import RequestRecord
from vllm_users.scenarios.base import LLMUser
from vllm_users.scenarios.request_spec import RequestSpec
from vllm_users.scenarios.session_runner import mark_node, new_message, node_context, replay
from vllm_users.workload.session_graph import Node, graph_of
from vllm_users.workload.synthetic_agents import AGENT_SCENARIO, agent_session
from vllm_users.workload.ticket import Ticket
from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_prompts import TracePrompts

__all__ = ["AgentUser"]

TEXT_SEED = 2**41  # a node's text seed: past every trace line's and graph node's (index * 2**16 + its place)


class AgentUser(LLMUser):
    """Runs one synthetic agent session per ticket (docs/agents.md)."""

    scenario = AGENT_SCENARIO

    def setup_scenario(self) -> None:
        """The prompt maker of exact lengths (the run's length model, or --tokenizer)."""
        o = self.options
        count = None
        if o.prompt.tokenizer:
            from vllm_users.workload.source import load_tokenizer

            count = load_tokenizer(o.prompt.tokenizer)
        self.prompts = TracePrompts(self.length_model(), seed=o.request.seed, count=count)

    def flow(self, ticket: Ticket) -> None:
        """The ticket's session: every node once its parents completed."""
        graph = graph_of(agent_session(self.options.agents, self.options.request.seed, ticket.index))
        replay(self, ticket, graph, self.node_request)

    def node_request(
        self, node: Node, index: int, history: list[dict[str, Any]], joined: list[str]
    ) -> RequestSpec:
        """A call's chat request: its history, then the joined answers and its new text of new_len tokens."""
        n = node.new_len or 1
        text = self.prompts.text(TraceRequest(0.0, input_len=n), TEXT_SEED + index * 2**16 + node.order)
        messages = [*history, {"role": "user", "content": new_message(joined, text)}]
        out = node.request.output_len or self.options.request.output_len
        body = self.sampling_params(out)
        body["messages"] = messages
        return RequestSpec(
            body=body,
            want_text=True,
            input_len=n,
            output_len=out,
            turn=node.turn,
            session=index,
            context={"messages": messages, "node": node_context(node)},
        )

    def check(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """The record names its node, subagent and depth."""
        mark_node(spec.context, rec)

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """The session's first call alone (flow sends the whole session)."""
        graph = graph_of(agent_session(self.options.agents, self.options.request.seed, ticket.index))
        return self.node_request(graph.nodes[0], ticket.index, [], [])
