"""The option groups of the prompts: what every request asks, and where its prompt comes from."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.option_spec import BOTH, RUN, opt
from vllm_users.workload.datasets import FORMATS
from vllm_users.workload.schemas import COMPLEXITIES

JSON_MODES = ("response_format", "structured_outputs", "guided_json")


@dataclass(frozen=True)
class RequestOptions:
    """What every request asks: lengths, sampling, streaming, extra headers."""

    input_len: int = opt(128, T.pos_int, "Prompt tokens per request", *BOTH)
    output_len: int = opt(128, T.pos_int, "max_tokens per request", *BOTH)
    range_ratio: float = opt(0.0, T.ratio, "Lengths vary uniformly by +-ratio (vLLM's)", *BOTH)
    ignore_eos: bool = opt(False, None, "Send ignore_eos (exact output lengths)", *BOTH)
    temperature: float = opt(0.0, T.nonneg_float, "Sampling temperature", *BOTH)
    seed: int = opt(0, T.nonneg_int, "Seed for prompts, schemas and arrivals", *BOTH)
    no_stream: bool = opt(
        False, None, "Non-streamed requests: E2EL and usage tokens, no TTFT/ITL/TPOT", *BOTH
    )
    header: tuple[str, ...] = opt(
        (),
        T.header,
        "Extra header of every request (repeatable): the preflight, the "
        "load, /metrics on the host, --profile; e.g. a gateway's credential (never "
        "written, docs/auth.md) or the simulator's X-Sim-Fault",
        RUN,
        repeat=True,
        metavar="'NAME: VALUE'",
        secret=True,
    )


@dataclass(frozen=True)
class PromptOptions:
    """Where prompts come from, shared prefixes, and the multi-turn, tools and json scenarios' settings."""

    tokenizer: str = opt("", T.text, "Local tokenizer directory for exact prompt lengths", *BOTH)
    dataset: str = opt("", T.text, "ShareGPT JSON or JSONL file of prompts", *BOTH)
    dataset_format: str = opt("auto", T.text, "Dataset format", *BOTH, choices=FORMATS)
    prefix_len: int = opt(0, T.nonneg_int, "Shared system-prompt tokens (prefix caching)", *BOTH)
    cache_rate: float = opt(0.0, T.fraction, "Fraction of requests that start with a shared prefix", *BOTH)
    num_prefixes: int = opt(1, T.pos_int, "How many distinct shared prefixes (K)", *BOTH)
    num_turns: int = opt(4, T.pos_int, "multi-turn: turns per conversation", *BOTH)
    tool_choice: str = opt("required", T.text, "tools: auto | required | <function name>", *BOTH)
    tool_followup: bool = opt(False, None, "tools: send the tool result back and measure the answer", *BOTH)
    schema_complexity: str = opt(
        "mixed", T.text, "json: generated schemas' shape", *BOTH, choices=COMPLEXITIES
    )
    json_schema: str = opt("", T.text, "json: a JSON Schema file to use instead of generated schemas", *BOTH)
    json_mode: str = opt("response_format", T.text, "json: how to ask for JSON", *BOTH, choices=JSON_MODES)
