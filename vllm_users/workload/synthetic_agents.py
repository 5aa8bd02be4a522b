"""Synthetic agent sessions (`--scenario agent`): seeded session graphs of calls, tool waits and subagents.

Session `index` of seed `seed` is always the same graph (`agent_session`): the main agent makes a number of calls
drawn around `--agent-turns`; after each call but the last it runs a tool (a wait drawn around `--agent-tool-ms`),
and with probability `--agent-subagent-rate` it launches a fan-out of subagents (around `--agent-fanout` of them),
each forked from that call, making calls of its own (around `--agent-subagent-turns`) and joined by the parent's
next call; a subagent may launch its own down to `--agent-depth`. Each call appends new tokens (around
`--agent-new-tokens`; the first call `--agent-first-tokens`) and answers around `--agent-output-tokens`; a call
whose context would pass `--agent-max-context` compacts: it starts a new history (`session_graph.py`'s reset).
Counts are 1 + an exponential draw (mean the option's), token counts exponential (at least 1), so every figure's
mean is its option's. docs/agents.md says where each default comes from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.errors import UsageError
from vllm_users.option_spec import BOTH, opt
from vllm_users.workload.session_graph import CALL, WAIT
from vllm_users.workload.trace import TraceRequest

__all__ = ["AGENT_SCENARIO", "AgentOptions", "agent_session"]

AGENT_SCENARIO = "agent"  # the scenario whose records are these sessions' calls (scenarios/agent_user.py)


@dataclass(frozen=True)
class AgentOptions:
    """The synthetic agents of `--scenario agent`: calls, tool waits, subagents and context growth per session."""

    agent_turns: float = opt(
        84.0, T.pos_float, "agent: mean LLM calls of a session's main agent (>= 1)", *BOTH, metavar="N"
    )
    agent_first_tokens: int = opt(
        450, T.pos_int, "agent: tokens of a session's first prompt (system prompt and task)", *BOTH
    )
    agent_new_tokens: float = opt(
        6440.0, T.pos_float, "agent: mean new tokens a later call appends (tool results, edits)", *BOTH
    )
    agent_output_tokens: float = opt(523.0, T.pos_float, "agent: mean answer tokens of a call", *BOTH)
    agent_tool_ms: float = opt(
        2000.0, T.nonneg_float, "agent: mean tool wait after a call, ms (0: none)", *BOTH, metavar="MS"
    )
    agent_subagent_rate: float = opt(
        0.04, T.nonneg_float, "agent: chance that a call launches subagents (0 to 1)", *BOTH, metavar="P"
    )
    agent_fanout: float = opt(1.5, T.pos_float, "agent: mean subagents a launch starts (>= 1)", *BOTH)
    agent_subagent_turns: float = opt(
        10.0, T.pos_float, "agent: mean LLM calls of a subagent (>= 1)", *BOTH, metavar="N"
    )
    agent_depth: int = opt(1, T.nonneg_int, "agent: how deep subagents may nest (0: none)", *BOTH)
    agent_max_context: int = opt(
        131072, T.pos_int, "agent: a call whose context would pass this compacts (a new history)", *BOTH
    )

    def check(self) -> None:
        """One-line UsageError for values no session can have."""
        if self.agent_turns < 1 or self.agent_subagent_turns < 1 or self.agent_fanout < 1:
            raise UsageError(
                "--agent-turns, --agent-subagent-turns and --agent-fanout are means of counts >= 1"
            )
        if not 0 <= self.agent_subagent_rate <= 1:
            raise UsageError(
                f"--agent-subagent-rate is a chance from 0 to 1, got {self.agent_subagent_rate:g}"
            )
        if self.agent_first_tokens + self.agent_output_tokens > self.agent_max_context:
            raise UsageError("--agent-max-context must hold the first prompt and its answer")


def _count(rng: random.Random, mean: float) -> int:
    """1 + an exponential draw: a count >= 1 of mean `mean`."""
    return 1 + int(round(rng.expovariate(1.0 / (mean - 1)))) if mean > 1 else 1


def _tokens(rng: random.Random, mean: float) -> int:
    return max(1, int(round(rng.expovariate(1.0 / mean))))


class _Builder:
    """The nodes of one session, its agents' chains built depth first."""

    def __init__(self, o: AgentOptions, rng: random.Random, session: str) -> None:
        self.o, self.rng, self.session = o, rng, session
        self.nodes: list[TraceRequest] = []
        self.agents = 0

    def _add(
        self,
        kind: str,
        parents: list[str],
        agent: str | None,
        *,
        new: int | None = None,
        context: int | None = None,
        output: int | None = None,
        wait_ms: float | None = None,
    ) -> str:
        key = f"{agent or 'main'}/{len(self.nodes)}"
        self.nodes.append(
            TraceRequest(
                0.0,
                input_len=new,
                output_len=output,
                session_id=self.session,
                turn=len(self.nodes),
                node=key,
                parents=tuple(parents),
                kind=kind,
                wait_ms=wait_ms,
                agent=agent,
                context_len=context,
            )
        )
        return key

    def chain(self, agent: str | None, fork: str | None, context: int, depth: int) -> str:
        """One agent's calls after `fork` (its history `context` tokens long); the key of its last node."""
        o, rng = self.o, self.rng
        calls = _count(rng, o.agent_turns if agent is None else o.agent_subagent_turns)
        prev: str | None = fork
        joins: list[str] = []
        for k in range(calls):
            new = o.agent_first_tokens if agent is None and k == 0 else _tokens(rng, o.agent_new_tokens)
            out = _tokens(rng, o.agent_output_tokens)
            parents = ([prev] if prev else []) + joins
            if (
                context + new + out > o.agent_max_context
            ):  # compaction: a recorded prompt shorter than the history
                new = min(new, o.agent_max_context - out)
                key = self._add(CALL, parents, agent, context=new, output=out)
                context = new + out
            else:
                key = self._add(CALL, parents, agent, new=new, output=out)
                context += new + out
            prev, joins = key, []
            if k + 1 == calls:
                break
            if depth < o.agent_depth and rng.random() < o.agent_subagent_rate:
                for _ in range(_count(rng, o.agent_fanout)):
                    self.agents += 1
                    joins.append(self.chain(f"sub{self.agents}", key, context, depth + 1))
            if o.agent_tool_ms > 0:
                prev = self._add(WAIT, [key], agent, wait_ms=rng.expovariate(1.0 / o.agent_tool_ms))
        return prev or ""


def agent_session(o: AgentOptions, seed: int, index: int) -> list[TraceRequest]:
    """Session `index`'s nodes (seeded by `seed` and `index`), in an order where parents come first."""
    b = _Builder(o, random.Random(f"agent:{seed}:{index}"), f"agent-{index}")
    b.chain(None, None, 0, 0)
    return b.nodes
