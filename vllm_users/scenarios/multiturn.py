"""The multi-turn scenario: each user holds a conversation of --num-turns turns; every turn reuses the prefix.

One ticket is one request (one turn); a conversation is a session of several tickets, recorded under the
index of its first ticket. Conversations are numbered over the whole run (worker i of n numbers
i, i+n, i+2n, ...); the number decides the system prompt (shared for a fraction --cache-rate of consecutive
numbers, see vllm_users.workload.prefixes) and the text of every user message, so the same --seed gives the same
conversations whichever user runs them.
"""

from __future__ import annotations

import itertools
import random
from typing import TYPE_CHECKING, Any

from vllm_users.client.stream import StreamResult
from vllm_users.distributed import env_state
from vllm_users.measure.record import RequestRecord
from vllm_users.scenarios.base import LLMUser
from vllm_users.scenarios.request_spec import RequestSpec
from vllm_users.workload.prefixes import SharedPrefixes, from_options
from vllm_users.workload.prompt_options import PromptOptions
from vllm_users.workload.prompts import sample_len
from vllm_users.workload.ticket import Ticket

if TYPE_CHECKING:
    pass

_conversations = itertools.count()  # per process: this worker's conversation counter


def next_conversation(worker_index: int, worker_count: int) -> int:
    """A run-wide conversation number: worker i of n takes i, i+n, i+2n, ..."""
    return worker_index + max(1, worker_count) * next(_conversations)


class MultiTurnUser(LLMUser):
    """A conversation per user: turn k sends the whole history plus a new user message."""

    scenario = "multi-turn"

    def setup_scenario(self) -> None:
        """Shared prefixes and lengths from the run's options; no conversation yet."""
        o = self.options
        self.lm = self.length_model()
        self.prefixes: SharedPrefixes = from_options(o.prefix, o.request.seed, self.lm)
        self.num_turns = o.multiturn.num_turns
        self.conv: list[dict[str, Any]] | None = None
        self.turn = 0
        self.key = 0
        self.session = 0
        self.dataset = _dataset_turns(o.prompt)

    def _start(self, key: int) -> None:
        self.key = key
        self.turn = 0
        system = self.prefixes.text(key)
        self.conv = [{"role": "system", "content": system}] if system is not None else []

    def _user_message(self) -> tuple[str, int]:
        o = self.options
        if self.dataset:
            turns = self.dataset[self.key % len(self.dataset)]
            text = turns[self.turn % len(turns)]
            return text, len(text.split())
        rng = random.Random(f"turn:{o.request.seed}:{self.key}:{self.turn}")
        n = sample_len(o.request.input_len, o.request.range_ratio, rng)
        return self.lm.text(n, rng), n

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """The next turn of this user's conversation (a new conversation after --num-turns turns)."""
        if self.conv is None or self.turn >= self.num_turns:
            ctx = env_state.context(self.environment)
            self._start(next_conversation(ctx.index, ctx.count))
            self.session = ticket.index
        assert self.conv is not None
        text, n = self._user_message()
        messages = self.conv + [{"role": "user", "content": text}]
        o = self.options
        out = sample_len(
            o.request.output_len,
            o.request.range_ratio,
            random.Random(f"out:{o.request.seed}:{self.key}:{self.turn}"),
        )
        body = self.sampling_params(out)
        body["messages"] = messages
        return RequestSpec(
            body=body,
            want_text=True,
            output_len=out,
            turn=self.turn,
            session=self.session,
            context={"messages": messages, "user_tokens": n},
        )

    def check(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """Note which conversation and whether its system prompt is a shared one."""
        rec.extra = {
            "conversation": self.key,
            "shared_prefix": bool(self.prefixes.enabled and self.prefixes.is_shared(self.key)),
        }

    def after(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """Append the assistant's reply; a failed turn ends the conversation (the next ticket starts anew)."""
        if rec.error is not None:
            self.conv = None
            return
        self.conv = spec.context["messages"] + [{"role": "assistant", "content": res.text}]
        self.turn += 1


def _dataset_turns(o: PromptOptions) -> list[list[str]]:
    """User messages of each dataset conversation (multi-turn ShareGPT), when --dataset is given."""
    if not o.dataset:
        return []
    from vllm_users.workload.datasets import load_dataset_cached

    entries = load_dataset_cached(o.dataset, o.dataset_format)
    return [e.user_turns for e in entries if e.user_turns]
