"""`vllm-locust run --preset NAME`: defaults for the guide's scenes, checks of scenario inputs, the MoE sweep.

A preset is a layer of values (orchestration.config): above the table's defaults, below the config file, the
environment and the command line, so it only fills options the user did not give anywhere.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from vllm_users.client import stdlib_http
from vllm_users.errors import UsageError
from vllm_users.options import Options

SIM_DETAILS = "--enable-prompt-tokens-details"
SIM_MOE = "--num-experts 16 --topk 2 --router-skew 0.8"
DEFAULT_SWEEP = "1,2,4,8,16,32,64"

PRESETS: dict[str, dict[str, Any]] = {
    "latency": {"users": 1, "workers": 1, "num_prompts": 32, "input_len": 128, "output_len": 128,
                "ignore_eos": True, "range_ratio": 0.0},
    "throughput": {"request_rate": math.inf, "max_concurrency": 64, "num_prompts": 512, "input_len": 512,
                   "output_len": 256, "ignore_eos": True},
    "prefix-caching": {"scenario": "multi-turn", "prefix_len": 512, "cache_rate": 0.75, "num_prefixes": 4,
                       "num_turns": 4, "users": 8, "num_prompts": 128, "input_len": 64, "output_len": 64,
                       "sim_args": SIM_DETAILS},
    "moe": {"concurrency_sweep": DEFAULT_SWEEP, "input_len": 128, "output_len": 128, "ignore_eos": True,
            "sim_args": SIM_MOE},
    "short-long": {"input_len": 64, "output_len": 2048, "ignore_eos": True, "users": 8, "num_prompts": 32},
    "long-short": {"input_len": 4096, "output_len": 128, "ignore_eos": True, "users": 8, "num_prompts": 32},
}  # fmt: skip
DESCRIPTIONS = {
    "latency": "one request at a time, fixed lengths: the latency floor",
    "throughput": "all requests at once (rate inf) capped by --max-concurrency: peak throughput",
    "prefix-caching": "multi-turn conversations sharing system prompts: TTFT by turn, hit rate",
    "moe": "concurrency sweep 1..64: output tok/s scaling efficiency and expert load balance",
    "short-long": "64 prompt tokens -> 2048 generated (decode-bound)",
    "long-short": "4096-token document -> 128-token summary (prefill-bound)",
}
# a preset value is skipped when the user gave one of these (they would contradict each other)
_CONFLICTS = {
    "request_rate": ("users",),
    "max_concurrency": ("users",),
    "users": ("request_rate", "max_concurrency"),
    "concurrency_sweep": ("sweep",),
    "scenario": ("locustfile",),  # -f brings its own users: a preset's scenario is not added to them
}


def preset_layer(name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The preset's values, less those the user `given` (in any layer) or that contradict them."""
    if name not in PRESETS:
        raise UsageError(f"--preset {name!r}: expected one of {', '.join(sorted(PRESETS))}")
    out = {}
    for dest, value in PRESETS[name].items():
        if dest in given or any(c in given for c in _CONFLICTS.get(dest, ())):
            continue
        if dest == "sim_args" and given.get("host"):
            continue  # a real server: its own flags
        out[dest] = value
    return out


def prepare(o: Options, scenario_names: list[str]) -> Options:
    """Scenario defaults and input checks before any load; a UsageError (DatasetError, SchemaError,
    TokenizerError) on bad input."""
    if "burst" in scenario_names and o.num_prompts is None and o.run_time is None:
        from vllm_users.scenarios.burst import plan_from_options

        o = dataclasses.replace(o, run_time=plan_from_options(o, o.users).total_s + 5)  # the shape ends the run
    if o.dataset:
        from vllm_users.workload.datasets import load_dataset

        load_dataset(o.dataset, o.dataset_format)
    if o.json_schema:
        from vllm_users.workload.schemas import load_schema_file

        load_schema_file(o.json_schema)
    if o.tokenizer:
        from vllm_users.workload.source import load_tokenizer

        load_tokenizer(o.tokenizer)
    return o


# ----- concurrency sweep (moe preset) -----
_EXPERT_RE = re.compile(r"^vllm:moe_expert_tokens_total\{([^}]*)\}\s+([0-9.eE+-]+)", re.M)


def expert_counters(host: str, timeout: float = 5.0) -> dict[str, float] | None:
    """`vllm:moe_expert_tokens_total{expert}` from the server's /metrics; None when it has none."""
    try:
        with stdlib_http.urlopen(host.rstrip("/") + "/metrics", timeout=timeout) as resp:  # interim 1xx skipped
            text = resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return None
    out: dict[str, float] = {}
    for labels, value in _EXPERT_RE.findall(text):
        m = re.search(r'expert="([^"]*)"', labels)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(value)
    return out or None


def expert_balance(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """Per-expert token deltas of one step: max/mean and coefficient of variation (None without counters)."""
    if not after:
        return None
    delta = [after[k] - (before or {}).get(k, 0.0) for k in sorted(after, key=lambda x: (len(x), x))]
    n = len(delta)
    mean = sum(delta) / n
    if mean <= 0:
        return {"experts": n, "tokens": 0.0, "max_over_mean": None, "cv": None}
    std = math.sqrt(sum((d - mean) ** 2 for d in delta) / n)
    return {"experts": n, "tokens": sum(delta), "max_over_mean": max(delta) / mean, "cv": std / mean,
            "per_expert": delta}  # fmt: skip
