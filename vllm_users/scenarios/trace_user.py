"""The trace scenario (`--trace FILE`): each ticket is one entry of the trace's schedule, sent as the trace says.

The open-loop schedule (`vllm_users.distributed.transport.open_loop` with `workload/trace_schedule.py`) hands this user
the trace's entry at its offset; the user sends it: the line's prompt/messages as given, or a prompt of its exact
length (mooncake: its hash blocks, `workload/trace_prompts.py`), `output_len` as max_tokens, the line's `model`
and `priority` in the body and its `tenant` as the record's request_class. A session's entry is its first turn;
the user then sends each later turn `think_ms` after the one before completed, with the real earlier answers in
the messages, and ends the session early when a turn fails or the run stops. Records are kept under the line's
scenario (a `records` trace replays a run's scenario mix), else "trace". A line's `endpoint` sends it to that API
(else --endpoint; pooling bodies as `scenarios/pooling.py` builds them) and its `images` attaches exactly that many
images to a chat request (else --images).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import gevent.lock

from vllm_users.client.stream import StreamResult
from vllm_users.distributed import env_state
from vllm_users.measure.record import POOLING_ENDPOINTS, RequestRecord
from vllm_users.scenarios.base import LLMUser
from vllm_users.scenarios.pooling import answered_items, embeddings_body, rerank_body
from vllm_users.scenarios.request_spec import RequestSpec, responses_body
from vllm_users.scenarios.session_runner import mark_node, new_message, node_context, replay
from vllm_users.workload.prompts import LengthModel
from vllm_users.workload.session_graph import Node, graph_of, path_graph
from vllm_users.workload.ticket import Ticket
from vllm_users.workload.trace import TraceRequest
from vllm_users.workload.trace_prompts import TracePrompts
from vllm_users.workload.trace_schedule import TracePlan, plan_of

__all__ = ["TraceUser"]

_makers: dict[
    tuple[Any, ...], TracePrompts
] = {}  # per process: (trace, block size, seed, tokenizer, lengths)
_lock = gevent.lock.BoundedSemaphore()
GRAPH_SEED = 2**40  # a graph node's text is seeded past every line index (index * 2**16 + its place)


class TraceUser(LLMUser):
    """Replays the requests of `--trace` on the open-loop schedule (docs/traces.md)."""

    scenario = "trace"

    def setup_scenario(self) -> None:
        """Read the trace (once per process, before the schedule's t0) and build its prompt maker."""
        o = self.options
        if not o.trace.trace:
            raise RuntimeError("the trace scenario needs --trace FILE")
        self.plan: TracePlan = plan_of(o.trace, o.load.num_prompts)
        lm = self.length_model()
        key = (o.trace.trace, o.trace.trace_block_size, o.request.seed, o.prompt.tokenizer, id(lm))
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
        if o.prompt.tokenizer:
            from vllm_users.workload.source import load_tokenizer

            count = load_tokenizer(o.prompt.tokenizer)
        prompts = TracePrompts(lm, o.trace.trace_block_size, o.request.seed, count)
        env = getattr(self, "environment", None)
        index, n = (env_state.context(env).index, env_state.context(env).count) if env is not None else (0, 1)
        prompts.warm(
            h
            for i, _ in self.plan.entries
            if i % n == index
            for r in self.plan.requests_of(i)
            for h in r.hash_ids
        )
        return prompts

    def flow(self, ticket: Ticket) -> None:
        """One entry: a request, or a whole session run as its graph (a linear session: one path, turn k+1
        think_ms after turn k completed; a graph trace: every node once its parents completed)."""
        turns = self.plan.requests_of(ticket.index)
        if len(turns) == 1 and turns[0].node is None:
            spec = self.spec_for(turns[0], ticket.index, 0, None)
            self.send(spec, ticket, scenario=turns[0].scenario or self.scenario)
            return
        graph = graph_of(turns, self.plan.trace.path) if turns[0].node is not None else path_graph(turns)

        replay(self, ticket, graph, self._node_spec)

    def _node_spec(
        self, node: Node, index: int, history: list[dict[str, Any]], joined: list[str]
    ) -> RequestSpec:
        """A call's request: its history, then one user message of the joined answers and its new text (a graph
        trace's new_len tokens; a linear session's line as given)."""
        req = node.request
        if req.node is None:  # a linear session's turn: its line as the jsonl gives it
            spec = self.spec_for(req, index, node.turn, history)
        else:
            seed = GRAPH_SEED + index * 2**16 + node.order  # each node's own text, apart from every line's
            text = self.prompts.text(TraceRequest(0.0, input_len=node.new_len), seed) if node.new_len else ""
            line = replace(
                req, input_len=node.new_len, prompt=new_message(joined, text), messages=None, hash_ids=()
            )
            spec = self.spec_for(line, index, node.turn, history)
            spec.context["node"] = node_context(node)
        spec.context["scenario"] = req.scenario
        return spec

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """The request of a one-request entry (flow sends sessions turn by turn)."""
        return self.spec_for(self.plan.requests_of(ticket.index)[0], ticket.index, 0, None)

    def spec_for(
        self, req: TraceRequest, index: int, turn: int, history: list[dict[str, Any]] | None
    ) -> RequestSpec:
        """The request of one trace line (`history`: a session's messages so far, None outside a session), to the
        line's endpoint (else --endpoint) with the line's image count (else --images)."""
        o = self.options
        api = req.endpoint or o.scenario.endpoint
        if api in POOLING_ENDPOINTS:
            return self._pooling_spec(req, index, api)
        out = req.output_len or o.request.output_len
        body = self.sampling_params(out)
        if req.model:
            body["model"] = req.model
        if req.priority is not None:
            body["priority"] = req.priority  # vLLM's scheduling priority (--scheduling-policy priority)
        chat = api in ("chat", "responses") or history is not None or req.messages is not None
        context: dict[str, Any] = {}
        if req.images is not None:
            context["images"] = req.images  # exactly this many (LLMUser.send attaches them on chat only)
        if chat:
            messages = self.prompts.messages(req, index, history)
            body["messages"] = messages
            context["messages"] = messages
        else:
            body["prompt"] = self.prompts.user_content(req, index)
        responses = api == "responses"
        return RequestSpec(
            body=responses_body(body) if responses else body,
            chat=chat,
            want_text=history is not None,
            input_len=req.input_len,
            output_len=out,
            turn=turn,
            session=index,
            context=context,
            request_class=req.tenant,
            endpoint="responses" if responses else None,
            # --endpoint-policy session: one prefix chain (its first block) on one endpoint; a session keeps its own
            affinity=f"prefix:{req.hash_ids[0]}" if req.hash_ids and history is None else None,
        )

    def _pooling_spec(self, req: TraceRequest, index: int, api: str) -> RequestSpec:
        """An embeddings line: its prompt as the one input; a rerank or score line: its prompt as the query and
        --rerank-docs documents of the same length (seeded by the line's index), bodies as the pooling users'."""
        query = self.prompts.user_content(req, index)
        if api == "embeddings":
            return self._pooled(req, api, embeddings_body([query]), 1, req.input_len, index)
        n, length = self.options.scenario.rerank_docs, req.input_len
        docs = (
            [query] * n
            if length is None
            else [
                self.prompts.text(TraceRequest(0.0, input_len=length), -1 - index * n - d) for d in range(n)
            ]
        )  # negative indices: other texts than any line's own
        tokens = None if length is None else length * (n + 1)
        return self._pooled(req, api, rerank_body(api, query, docs), n, tokens, index)

    def _pooled(
        self, req: TraceRequest, api: str, body: dict[str, Any], items: int, tokens: int | None, index: int
    ) -> RequestSpec:
        """A non-streamed pooling request of a trace line that must answer `items` inputs."""
        body = {"model": req.model or self.model, **body}
        return RequestSpec(
            body=body,
            chat=False,
            endpoint=api,
            input_len=tokens,
            session=index,
            context={"items": items},
            request_class=req.tenant,
        )

    def check(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """A graph call's record names its node, subagent and depth; a pooling answer must answer every input
        (as the pooling users check)."""
        mark_node(spec.context, rec)
        want = spec.context.get("items")
        if want is not None and (got := answered_items(rec.endpoint, res.body)) != want:
            rec.error = "bad_response"
            rec.error_detail = f"{rec.endpoint} answer has {got} items for {want} inputs"
