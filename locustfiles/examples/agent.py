"""An agent: each session plans, calls tools STEPS times, then answers, thinking between requests.

    vllm-locust run -f locustfiles/examples/agent.py --workers 2 --num-prompts 20

One ticket (one of --num-prompts, or one arrival of --request-rate) is one session of STEPS + 2 requests.
Every request is its own record: `session` (the ticket's index) links them and `turn` orders them
(0 = plan, 1..STEPS = tool steps, STEPS + 1 = answer); result.json's `ttft_by_turn` shows how TTFT grows
with the history. A failed request ends its session.
"""

from __future__ import annotations

import json
import random
from typing import Any

from vllm_users import LLMUser, Reply, RequestSpec, Ticket, random_words

STEPS = 2  # tool steps between the plan and the answer
THINK_S = 0.2  # think time before each follow-up request (the agent runs its tool)


class AgentUser(LLMUser):
    """Plan, STEPS tool observations, answer: STEPS + 2 requests per session, the history growing each turn."""

    scenario = "agent"

    def ask(self, ticket: Ticket, messages: list[dict[str, Any]], max_tokens: int) -> Reply:
        """One request of this session with the conversation so far."""
        body = self.sampling_params(max_tokens)
        body["messages"] = messages
        return self.send(RequestSpec(body=body, want_text=True, output_len=max_tokens), ticket)

    def flow(self, ticket: Ticket) -> None:
        """The whole session of one ticket."""
        rng = random.Random(f"agent:{self.options.request.seed}:{ticket.index}")
        out = self.options.request.output_len
        messages = [{"role": "user", "content": f"Plan how to find out {random_words(12, rng)}. Use tools."}]
        reply = self.ask(ticket, messages, out)  # turn 0: the plan
        for step in range(STEPS):
            if not reply.ok or not self.think(THINK_S):  # a failure, or the run is stopping: end the session
                return
            observation = json.dumps({"tool": f"search_{step}", "result": random_words(30, rng)})
            messages += [
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": f"Tool result: {observation}. Next step?"},
            ]
            reply = self.ask(ticket, messages, out)  # turns 1..STEPS
        if reply.ok and self.think(THINK_S):
            messages += [
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": "Now answer in two sentences."},
            ]
            self.ask(ticket, messages, out)  # turn STEPS + 1: the answer
