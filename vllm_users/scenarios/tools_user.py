"""The tools scenario: `tools` + `tool_choice`; streamed tool calls validated; optional follow-up step."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from vllm_users.client.stream import StreamResult
from vllm_users.measure.record import RequestRecord
from vllm_users.scenarios.base import LLMUser
from vllm_users.scenarios.request_spec import Reply, RequestSpec
from vllm_users.workload.prompts import random_words
from vllm_users.workload.schemas import Verdict, generate_schema, validate_instance
from vllm_users.workload.source import prompt_source, with_instruction
from vllm_users.workload.ticket import Ticket

TOOL_NAMES = ("get_weather", "search_docs", "book_meeting", "convert_currency", "lookup_order", "send_email")
INSTRUCTION = "Use one of the tools to help with this request: "
FOLLOWUP_SCENARIO = "tools-followup"


def make_tools(seed: int, count: int = 4) -> list[dict[str, Any]]:
    """`count` OpenAI function tools with bounded parameter schemas, derived from `seed`."""
    rng = random.Random(f"tools:{seed}")
    names = rng.sample(TOOL_NAMES, min(count, len(TOOL_NAMES)))
    tools = []
    for i, name in enumerate(names):
        params = generate_schema(seed * 31 + i, rng.choice(("flat", "enums", "mixed")))
        params = {k: v for k, v in params.items() if k not in ("$schema", "title")}
        tools.append(
            {
                "type": "function",
                "function": {"name": name, "description": f"{name.replace('_', ' ')}", "parameters": params},
            }
        )
    return tools


def tool_choice_field(choice: str) -> Any:
    """--tool-choice as the request field: "auto", "required", "none" or a named function."""
    if choice in ("auto", "required", "none"):
        return choice
    return {"type": "function", "function": {"name": choice}}


@dataclass(slots=True)
class ToolVerdict:
    """Validation of one answer's tool calls."""

    valid: bool
    detail: str = ""
    calls: int = 0


def judge_tool_calls(
    calls: dict[int, dict[str, Any]] | None, tools: list[dict[str, Any]], choice: str
) -> ToolVerdict:
    """Each call names a known tool, its arguments parse and match the parameters; the choice is honoured."""
    by_name = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    items = [calls[i] for i in sorted(calls)] if calls else []
    if not items:
        if choice == "auto" or choice == "none":
            return ToolVerdict(True, "answered with text", 0)
        return ToolVerdict(False, f"no tool call although tool_choice={choice}")
    for c in items:
        name = c.get("name")
        if name not in by_name:
            return ToolVerdict(False, f"call of unknown tool {name!r}", len(items))
        if choice not in ("auto", "required", "none") and name != choice:
            return ToolVerdict(False, f"called {name!r} although tool_choice named {choice!r}", len(items))
        try:
            args = json.loads(c.get("arguments") or "")
        except ValueError as e:
            return ToolVerdict(False, f"{name}: arguments are not JSON: {e}"[:200], len(items))
        v: Verdict = validate_instance(args, by_name[name])
        if not v.valid:
            return ToolVerdict(False, f"{name}: {v.detail}"[:200], len(items))
    return ToolVerdict(True, "", len(items))


class ToolsUser(LLMUser):
    """Sends a prompt with tools; the answer's tool calls must be valid (`invalid_tool_call` otherwise)."""

    scenario = "tools"

    def setup_scenario(self) -> None:
        """Tools from --seed, the choice from --tool-choice; prompts from the prompt source (random text,
        --dataset, --tokenizer, --prefix-len), with the tool instruction before the user's text."""
        o = self.options
        self.tools = make_tools(o.request.seed)
        self.choice = (o.tools.tool_choice or "required").strip()
        self.followup = o.tools.tool_followup
        self.reserve = len(INSTRUCTION.split())
        self.prompts = prompt_source(o, self.length_model(), chat=True, reserve=self.reserve)

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """The tool request of `ticket.index`."""
        p = self.prompts.get(ticket.index)
        body = self.sampling_params(max(p.output_len, 256))
        body["messages"] = with_instruction(p, INSTRUCTION)
        body["tools"] = self.tools
        body["tool_choice"] = tool_choice_field(self.choice)
        return RequestSpec(
            body=body,
            want_text=True,
            input_len=p.input_len + self.reserve,
            output_len=body["max_tokens"],
            context={"step": 0},
        )

    def flow(self, ticket: Ticket) -> None:
        """The tool request; with --tool-followup and valid calls, the tool results go back in the same
        session (turn 1) and the answer is recorded as tools-followup."""
        spec = self.build_request(ticket)
        first = self.send(spec, ticket)
        if self.followup and first.ok and first.record.valid and first.result.tool_calls:
            self.send(self.followup_request(spec, first), ticket, scenario=FOLLOWUP_SCENARIO)

    def check(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """Validate the tool calls of the first step; the follow-up's answer only has to exist."""
        if spec.context.get("step") == 1:
            rec.valid = True
            return
        v = judge_tool_calls(res.tool_calls, self.tools, self.choice)
        rec.valid = v.valid
        rec.extra = {"tool_calls": v.calls, "no_call": int(v.calls == 0 and v.valid)}
        if not v.valid:
            rec.error = "invalid_tool_call"
            rec.error_detail = v.detail

    def followup_request(self, spec: RequestSpec, first: Reply) -> RequestSpec:
        """The conversation so far plus the assistant's tool calls and a made-up result for each."""
        tool_calls = first.result.tool_calls or {}
        calls = [tool_calls[i] for i in sorted(tool_calls)]
        messages = list(spec.body["messages"])
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c.get("id") or f"call_{i}",
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c.get("arguments") or "{}"},
                    }
                    for i, c in enumerate(calls)
                ],
            }
        )
        rng = random.Random(first.record.seq)
        for i, c in enumerate(calls):
            result = {"ok": True, "result": random_words(12, rng)}
            messages.append(
                {"role": "tool", "tool_call_id": c.get("id") or f"call_{i}", "content": json.dumps(result)}
            )
        body = self.sampling_params(self.options.request.output_len)
        body["messages"] = messages
        body["tools"] = self.tools
        body["tool_choice"] = "none"
        return RequestSpec(
            body=body, want_text=False, output_len=self.options.request.output_len, context={"step": 1}
        )
