"""The json scenario: structured output by JSON Schema; every answer parsed and validated."""

from __future__ import annotations

from typing import Any

from vllm_users.client.stream import StreamResult
from vllm_users.measure.record import RequestRecord
from vllm_users.scenarios.base import LLMUser
from vllm_users.scenarios.request_spec import RequestSpec
from vllm_users.workload.schemas import judge_json, load_schema_file, schema_pool, worst_case_chars
from vllm_users.workload.source import prompt_source, with_instruction
from vllm_users.workload.ticket import Ticket

INSTRUCTION = "Extract a record from the notes below and answer with JSON that matches the schema. Notes: "
CHARS_PER_TOKEN_FLOOR = 2  # a JSON answer has at least ~2 chars per token; sizes max_tokens from the schema


def json_body_fields(schema: dict[str, Any], mode: str, name: str) -> dict[str, Any]:
    """The request fields that ask for `schema`: response_format, vLLM structured_outputs or guided_json."""
    if mode == "structured_outputs":
        return {"structured_outputs": {"json": schema}}
    if mode == "guided_json":
        return {"guided_json": schema}
    return {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": True},
        }
    }


class JsonUser(LLMUser):
    """Asks for a JSON answer under a generated (or given) schema; invalid JSON is `invalid_json`."""

    scenario = "json"

    def setup_scenario(self) -> None:
        """Schema pool from --seed/--schema-complexity (or --json-schema); prompts from the prompt source
        (random text, --dataset, --tokenizer, --prefix-len), with the JSON instruction before the user's text."""
        o = self.options
        if o.json.json_schema:
            self.schemas = [load_schema_file(o.json.json_schema)]
        else:
            self.schemas = schema_pool(o.request.seed, o.json.schema_complexity)
        self.mode = o.json.json_mode
        self.reserve = len(INSTRUCTION.split())
        self.prompts = prompt_source(o, self.length_model(), chat=True, reserve=self.reserve)

    def build_request(self, ticket: Ticket) -> RequestSpec:
        """Prompt `ticket.index` with schema `ticket.index % pool`; max_tokens fits the worst-case answer."""
        p = self.prompts.get(ticket.index)
        k = ticket.index % len(self.schemas)
        schema = self.schemas[k]
        need = worst_case_chars(schema) // CHARS_PER_TOKEN_FLOOR + 16
        max_tokens = max(p.output_len, need)
        body = self.sampling_params(max_tokens)
        body["messages"] = with_instruction(p, INSTRUCTION)
        body.update(json_body_fields(schema, self.mode, f"record_{k}"))
        return RequestSpec(
            body=body,
            want_text=True,
            input_len=p.input_len + self.reserve,
            output_len=max_tokens,
            context={"schema": schema, "schema_index": k},
        )

    def check(self, spec: RequestSpec, res: StreamResult, rec: RequestRecord) -> None:
        """Parse the whole answer and validate it against the schema it was asked for."""
        verdict = judge_json(res.text, spec.context["schema"], res.finish_reason)
        rec.valid = verdict.valid
        rec.extra = {"schema_index": spec.context["schema_index"]}
        if not verdict.valid:
            rec.error = "invalid_json"
            rec.error_detail = verdict.detail
