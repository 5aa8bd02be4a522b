"""The option groups of the prompts: what every request asks, and where its prompt comes from (a scenario's own
settings sit with the scenarios, vllm_users.scenarios.options; shared prefixes with theirs, workload.prefixes)."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.option_spec import BOTH, RUN, opt
from vllm_users.workload.datasets import FORMATS


@dataclass(frozen=True)
class RequestOptions:
    """What every request asks: lengths, sampling, streaming, extra headers."""

    input_len: int = opt(128, T.pos_int, "Prompt tokens per request", *BOTH)
    output_len: int = opt(128, T.pos_int, "max_tokens per request", *BOTH)
    range_ratio: float = opt(0.0, T.ratio, "Lengths vary uniformly by +-ratio (vLLM's)", *BOTH)
    ignore_eos: bool = opt(False, None, "Send ignore_eos (exact output lengths)", *BOTH)
    temperature: float = opt(0.0, T.nonneg_float, "Sampling temperature", *BOTH)
    seed: int = opt(
        0, T.nonneg_int, "Seed for prompts, schemas and arrivals (a repeat's own: +1 each)", *BOTH
    )
    sampling_seed: int = opt(
        -1,
        T.sampling_seed,
        "The `seed` every request body sends (the server's sampling); -1: none, as `vllm bench serve`",
        *BOTH,
    )
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
    """Where prompts come from: a dataset, or synthetic text measured with a tokenizer."""

    tokenizer: str = opt("", T.text, "Local tokenizer directory for exact prompt lengths", *BOTH)
    dataset: str = opt("", T.text, "ShareGPT JSON or JSONL file of prompts", *BOTH)
    dataset_format: str = opt("auto", T.text, "Dataset format", *BOTH, choices=FORMATS)
