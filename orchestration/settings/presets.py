"""`vllm-locust run --preset NAME`: defaults for the guide's scenes (the values, their descriptions, conflicts).

A preset is a layer of values (orchestration.settings.config): above the table's defaults, below the config file, the
environment and the command line, so it only fills options the user did not give anywhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vllm_users.errors import UsageError

SIM_DETAILS = "--enable-prompt-tokens-details"
SIM_MOE = "--num-experts 16 --topk 2 --router-skew 0.8"
DEFAULT_SWEEP = "1,2,4,8,16,32,64"

PRESETS: dict[str, dict[str, Any]] = {
    "latency": {
        "users": 1,
        "workers": 1,
        "num_prompts": 32,
        "input_len": 128,
        "output_len": 128,
        "ignore_eos": True,
        "range_ratio": 0.0,
    },
    "throughput": {
        "request_rate": math.inf,
        "max_concurrency": 64,
        "num_prompts": 512,
        "input_len": 512,
        "output_len": 256,
        "ignore_eos": True,
    },
    "prefix-caching": {
        "scenario": "multi-turn",
        "prefix_len": 512,
        "cache_rate": 0.75,
        "num_prefixes": 4,
        "num_turns": 4,
        "users": 8,
        "num_prompts": 128,
        "input_len": 64,
        "output_len": 64,
        "sim_args": SIM_DETAILS,
    },
    "moe": {
        "concurrency_sweep": DEFAULT_SWEEP,
        "input_len": 128,
        "output_len": 128,
        "ignore_eos": True,
        "sim_args": SIM_MOE,
    },
    "short-long": {"input_len": 64, "output_len": 2048, "ignore_eos": True, "users": 8, "num_prompts": 32},
    "long-short": {"input_len": 4096, "output_len": 128, "ignore_eos": True, "users": 8, "num_prompts": 32},
}
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
