"""Locust command-line options of vllm-locust (also from env VLLM_LOCUST_* and locust.conf)."""

from __future__ import annotations

import math
from typing import Any

from vllm_users.measure.metrics import (
    DEFAULT_METRIC_PERCENTILES,
    DEFAULT_PERCENTILE_METRICS,
    PercentileChoice,
)

# API keys never travel as options (Locust shows options in its UI and ships them to workers):
# they come from these environment variables on every process.
API_KEY_ENV = ("VLLM_LOCUST_API_KEY", "OPENAI_API_KEY")


def add_options(parser: Any) -> None:
    """Register our options on Locust's parser (init_command_line_parser listener)."""

    def opt(name: str, **kw: Any) -> None:
        env = "VLLM_LOCUST_" + name.lstrip("-").replace("-", "_").upper()
        parser.add_argument(name, env_var=env, **kw)

    opt("--model", default="", help="Served model name (default: the only model of /v1/models)")
    opt("--endpoint", default="chat", choices=["chat", "completions"], help="OpenAI API to call")
    opt("--input-len", type=int, default=128, help="Prompt tokens per request")
    opt("--output-len", type=int, default=128, help="max_tokens per request")
    opt("--range-ratio", type=float, default=0.0, help="Lengths vary uniformly by +-ratio (vLLM's)")
    opt("--ignore-eos", action="store_true", default=False, help="Send ignore_eos (exact output lengths)")
    opt("--temperature", type=float, default=0.0, help="Sampling temperature")
    opt("--seed", type=int, default=0, help="Seed for prompts, schemas and arrivals")
    opt("--num-prompts", type=int, default=0, help="Total requests over all workers (0 = until --run-time)")
    opt("--request-rate", type=float, default=0.0, help="Open loop: requests/s over all workers (0 = closed loop)")
    opt("--burstiness", type=float, default=1.0,
        help="Gamma shape of inter-arrivals: 1 = Poisson, <1 burstier, inf = constant intervals 1/rate")
    opt("--max-concurrency", type=int, default=0, help="Cap on in-flight requests over all workers (open loop)")
    opt("--stream-timeout", type=float, default=120.0, help="Read timeout per recv of a stream, seconds")
    opt("--results-dir", default="", help="Run directory the master writes records and results into")
    opt("--goodput", default="", help='SLOs, e.g. "ttft:500 tpot:50 e2el:10000" (ms)')
    opt("--ramp-up-strategy", default="", help="Open loop: ramp the rate linear|exponential (vllm bench serve's)")
    opt("--ramp-up-start-rps", type=float, default=0.0, help="Ramp: rate of the first request")
    opt("--ramp-up-end-rps", type=float, default=0.0, help="Ramp: rate of the last request")
    opt("--warmup", default="", help="Leave the first 30s / 200r of requests out of the statistics (kept, flagged)")
    opt("--cooldown", default="", help="Leave the last 30s / 200r of requests out of the statistics (kept, flagged)")
    opt("--percentile-metrics", default=",".join(DEFAULT_PERCENTILE_METRICS),
        help="Metrics whose percentiles the result reports (vLLM's): any of ttft,tpot,itl,e2el")
    opt("--metric-percentiles", default=",".join(f"{p:g}" for p in DEFAULT_METRIC_PERCENTILES),
        help='Percentiles reported for those metrics (vLLM\'s), e.g. "50,90,99,99.9"')
    opt("--vllm-stop-timeout", type=float, default=30.0, help="Seconds in-flight streams get to finish at stop")
    opt("--no-stream", action="store_true", default=False, help="Non-streamed requests (no TTFT/ITL)")
    opt("--tokenizer", default="", help="Local tokenizer directory for exact prompt lengths")
    opt("--dataset", default="", help="ShareGPT JSON or JSONL file of prompts")
    opt("--dataset-format", default="auto", choices=["auto", "sharegpt", "jsonl"], help="Dataset format")
    opt("--prefix-len", type=int, default=0, help="Shared system-prompt tokens (prefix caching)")
    opt("--cache-rate", type=float, default=0.0, help="Fraction of requests that start with a shared prefix")
    opt("--num-prefixes", type=int, default=1, help="How many distinct shared prefixes (K)")
    opt("--num-turns", type=int, default=4, help="multi-turn: turns per conversation")
    opt("--tool-choice", default="required", help="tools: auto | required | <function name>")
    opt("--tool-followup", action="store_true", default=False, help="tools: send the tool result back")
    opt("--schema-complexity", default="mixed", help="json: flat | nested | arrays | enums | mixed")
    opt("--fail-on-client-bound", action="store_true", default=False, help="Exit 5 when the client was the bottleneck")
    opt("--records-at-end", action="store_true", default=False,
        help="Workers send histograms and counters every second but keep their records on disk; the master "
        "collects the record files at the end (past one master's ingest ceiling, docs/scale.md)")
    opt("--extra-headers", default="", include_in_web_ui=False, help="JSON object of extra request headers")
    opt("--vllm-worker-count", type=int, default=0, include_in_web_ui=False, help="(set by the master)")
    opt("--vllm-t0", type=float, default=0.0, include_in_web_ui=False, help="(set by the master)")


def check_options(options: Any) -> None:
    """Raise ValueError (one line naming the flag) for values Locust's parser let through."""
    b = getattr(options, "burstiness", 1.0)
    if not b > 0:  # also NaN
        raise ValueError(f"--burstiness {b}: must be > 0 (1 = Poisson, inf = constant intervals)")
    PercentileChoice.parse(getattr(options, "percentile_metrics", ""), getattr(options, "metric_percentiles", ""))


def open_loop(options: Any) -> bool:
    """True when arrivals follow a schedule (--request-rate given)."""
    rate = getattr(options, "request_rate", 0.0) or 0.0
    return rate > 0 or math.isinf(rate)
