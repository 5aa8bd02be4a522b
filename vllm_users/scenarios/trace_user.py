"""The trace scenario (`--trace FILE`): each ticket is one entry of the trace's schedule, sent as the trace says.

The open-loop schedule (`vllm_users.distributed.open_loop` with `workload/trace_schedule.py`) hands this user
the trace's entry at its offset; the user sends it: the line's prompt/messages as given, or a prompt of its exact
length (mooncake: its hash blocks, `workload/trace_prompts.py`), `output_len` as max_tokens, the line's `model`
and `priority` in the body and its `tenant` as the record's request_class. A session's entry is its first turn;
the user then sends each later turn `think_ms` after the one before completed, with the real earlier answers in
the messages, and ends the session early when a turn fails or the run stops. Records are kept under the line's
scenario (a `records` trace replays a run's scenario mix), else "trace".
"""

from __future__ import annotations

from typing import Any

import gevent.lock

from vllm_users.distributed import env_state
from vllm_users.scenarios.base import LLMUser, RequestSpec
from vllm_users.workload.prompts import LengthModel
from vllm_users.workload.ticket import Ticket
from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_prompts import TracePrompts
from vllm_users.workload.trace_schedule import TracePlan, plan_of

__all__ = ["TraceUser"]

_makers: dict[
    tuple[Any, ...], TracePrompts
] = {}  # per process: (trace, block size, seed, tokenizer, lengths)
_lock = gevent.lock.BoundedSemaphore()


class TraceUser(LLMUser):
    """Replays the requests of `--trace` on the open-loop schedule (docs/traces.md)."""

    scenario = "trace"

    def setup_scenario(self) -> None:
        """Read the trace (once per process, before the schedule's t0) and build its prompt maker."""
        o = self.options
        if not o.trace:
            raise RuntimeError("the trace scenario needs --trace FILE")
        self.plan: TracePlan = plan_of(o)
        lm = self.length_model()
        key = (o.trace, o.trace_block_size, o.seed, o.tokenizer, id(lm))
        with _lock:  # one prompt maker per process: its block cache is shared by every user of the worker
            maker = _makers.get(key)
            if maker is None or maker.lengths is not lm:  # (an id the collector gave to a new length model)
                maker = _makers[key] = self._new_prompts(lm)
            self.prompts = maker

    def _new_prompts(self, lm: LengthModel) -> TracePrompts:
        """The process's prompt maker, its blocks of this worker's share built now (before t0: a block built
        when its request is due would be send lag)."""
        o = self.options
        count = None
        if o.tokenizer:
            from vllm_users.workload.source import load_tokenizer

            count = load_tokenizer(o.tokenizer)
        prompts = TracePrompts(lm, o.trace_block_size, o.seed, count)
        env = getattr(self, "environment", None)
        index, n = (env_state.context(env).index, env_state.context(env).count) if env is not None else (0, 1)
        prompts.warm(h for i, _ in self.plan.entries if i % n == index
                     for r in self.plan.requests_of(i) for h in r.hash_ids)  # fmt: skip
        return prompts

    def flow(self, ticket: Ticket) -> None:
        """One entry: a request, or a whole session (turn k+1 think_ms after turn k completed)."""
        turns = self.plan.requests_of(ticket.index)
        history: list[dict[str, Any]] = []
        for k, req in enumerate(turns):
            if k and req.think_ms and not self.think(req.think_ms / 1000.0):
                return  # the run is stopping: the session's later turns are not sent
            spec = self.spec_for(req, ticket.index, k, history if len(turns) > 1 else None)
            reply = self.send(spec, ticket, scenario=req.scenario or self.scenario)
            if k + 1 < len(turns):
                if not reply.ok:
                    return  # no answer to carry on: the session ends (fidelity counts its turns as not sent)
                history = spec.context["messages"] + [{"role": "assistant", "content": reply.text}]

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """The request of a one-request entry (flow sends sessions turn by turn)."""
        return self.spec_for(self.plan.requests_of(ticket.index)[0], ticket.index, 0, None)

    def spec_for(
        self, req: TraceRequest, index: int, turn: int, history: list[dict[str, Any]] | None
    ) -> RequestSpec:
        """The request of one trace line (`history`: a session's messages so far, None outside a session)."""
        o = self.options
        out = req.output_len or o.output_len
        body = self.sampling_params(out)
        if req.model:
            body["model"] = req.model
        if req.priority is not None:
            body["priority"] = req.priority  # vLLM's scheduling priority (--scheduling-policy priority)
        chat = o.endpoint == "chat" or history is not None or req.messages is not None
        context: dict[str, Any] = {}
        if chat:
            messages = self.prompts.messages(req, index, history)
            body["messages"] = messages
            context["messages"] = messages
        else:
            body["prompt"] = self.prompts.user_content(req, index)
        return RequestSpec(body=body, chat=chat, want_text=history is not None, input_len=req.input_len,
                           output_len=out, turn=turn, session=index, context=context,
                           request_class=req.tenant)  # fmt: skip
