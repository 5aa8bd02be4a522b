"""The option groups of the users: the endpoint and scenario mix, and each scenario's own settings (multi-turn,
tools, json, burst)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.client.responses import APIS
from vllm_users.option_spec import BOTH, RUN, WORKER, opt
from vllm_users.workload.schemas import COMPLEXITIES

JSON_MODES = ("response_format", "structured_outputs", "guided_json")


@dataclass(frozen=True)
class ScenarioOptions:
    """Which API and users: the endpoint (Responses, embeddings, rerank, score; docs/scenarios.md), the
    scenario mix, a locustfile."""

    endpoint: str = opt(
        "chat",
        T.text,
        "OpenAI API to call (embeddings, rerank, score: the pooling users)",
        *BOTH,
        choices=APIS,
    )
    embed_batch: int = opt(
        1, T.pos_int, "--endpoint embeddings: inputs per request (a list input when > 1)", *BOTH
    )
    rerank_docs: int = opt(4, T.pos_int, "--endpoint rerank/score: documents per query", *BOTH)
    scenario: str = opt(
        "",
        T.text,
        "Scenario or weighted mix, e.g. chat or chat:3,json:1; a user class: "
        "package.module:Class (none: chat, or only -f's users)",
        RUN,
        WORKER,
    )
    locustfile: str = opt(
        "",
        T.text,
        "Your locustfile: its LLMUser subclasses run (beside --scenario, when given)",
        RUN,
        WORKER,
        short="-f",
        metavar="FILE",
    )


@dataclass(frozen=True)
class MultiTurnOptions:
    """The multi-turn scenario's conversations."""

    num_turns: int = opt(4, T.pos_int, "multi-turn: turns per conversation", *BOTH)


@dataclass(frozen=True)
class ToolsOptions:
    """The tools scenario's tool calls."""

    tool_choice: str = opt("required", T.text, "tools: auto | required | <function name>", *BOTH)
    tool_followup: bool = opt(False, None, "tools: send the tool result back and measure the answer", *BOTH)


@dataclass(frozen=True)
class JsonOptions:
    """The json scenario's schemas and how it asks for JSON."""

    schema_complexity: str = opt(
        "mixed", T.text, "json: generated schemas' shape", *BOTH, choices=COMPLEXITIES
    )
    json_schema: str = opt("", T.text, "json: a JSON Schema file to use instead of generated schemas", *BOTH)
    json_mode: str = opt("response_format", T.text, "json: how to ask for JSON", *BOTH, choices=JSON_MODES)


@dataclass(frozen=True)
class BurstOptions:
    """The burst scenario's quiet/spike/recover cycles."""

    burst_quiet_users: int = opt(
        0, T.nonneg_int, "burst: users while quiet (0 = max(1, spike users / 8))", *BOTH
    )
    burst_spike_users: int = opt(0, T.nonneg_int, "burst: users during the spike (0 = --users)", *BOTH)
    burst_quiet: float = opt(10.0, T.nonneg_float, "burst: seconds of quiet before the spike", *BOTH)
    burst_spike: float = opt(5.0, T.pos_float, "burst: seconds the spike lasts", *BOTH)
    burst_recover: float = opt(10.0, T.nonneg_float, "burst: seconds of quiet after the spike", *BOTH)
    burst_cycles: int = opt(1, T.pos_int, "burst: how many quiet/spike/recover cycles", *BOTH)
