"""`vllm-locust run --preset NAME`: defaults for the guide's scenes, checks of scenario inputs, the MoE sweep.

A preset only fills options the user did not give (command line, config file or environment).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import urllib.request
from typing import Any

from orchestration import config as C
from vllm_users.options import DEFAULTS

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


def _given(a: argparse.Namespace, dest: str, argv: list[str]) -> bool:
    flag = "--" + dest.replace("_", "-")
    if any(x == flag or x.startswith(flag + "=") for x in argv):
        return True
    return dest in DEFAULTS and getattr(a, dest) != DEFAULTS[dest]


def apply_preset(a: argparse.Namespace, argv: list[str] | None = None) -> list[str]:
    """Fill the preset's values into options the user left alone; returns the names filled."""
    name = a.preset
    if not name or vars(a).get("_preset_applied"):
        return []
    argv = list(sys.argv[1:] if argv is None else argv)
    filled = []
    for dest, value in PRESETS[name].items():
        if _given(a, dest, argv) or any(_given(a, c, argv) for c in _CONFLICTS.get(dest, ())):
            continue
        if dest == "sim_args" and vars(a).get("host"):
            continue  # a real server: its own flags
        setattr(a, dest, value)
        filled.append(dest)
    a._preset_applied = True
    return filled


def prepare(a: argparse.Namespace) -> None:
    """Preset defaults, scenario defaults and input checks before anything is sent; UsageError on bad input."""
    apply_preset(a)
    names = [n for n, _ in getattr(a, "mix", [])]
    if "burst" in names and a.num_prompts is None and a.run_time is None:
        from vllm_users.scenarios.burst import plan_from_options

        a.run_time = plan_from_options(a, a.users).total_s + 5  # the shape ends the run; this is a backstop
    if a.dataset:
        from vllm_users.workload.datasets import DatasetError, load_dataset

        try:
            load_dataset(a.dataset, a.dataset_format or "auto")
        except DatasetError as e:
            raise C.UsageError(str(e)) from None
    if a.json_schema:
        from vllm_users.workload.schemas import SchemaError, load_schema_file

        try:
            load_schema_file(a.json_schema)
        except SchemaError as e:
            raise C.UsageError(str(e)) from None
    if a.schema_complexity:
        from vllm_users.workload.schemas import COMPLEXITIES

        if a.schema_complexity not in COMPLEXITIES:
            raise C.UsageError(
                f"--schema-complexity {a.schema_complexity!r}: expected one of {', '.join(COMPLEXITIES)}"
            )
    if a.tokenizer:
        from vllm_users.workload.source import TokenizerError, load_tokenizer

        try:
            load_tokenizer(a.tokenizer)
        except TokenizerError as e:
            raise C.UsageError(str(e)) from None


# ----- concurrency sweep (moe preset) -----
_EXPERT_RE = re.compile(r"^vllm:moe_expert_tokens_total\{([^}]*)\}\s+([0-9.eE+-]+)", re.M)


def expert_counters(host: str, timeout: float = 5.0) -> dict[str, float] | None:
    """`vllm:moe_expert_tokens_total{expert}` from the server's /metrics; None when it has none."""
    try:
        with urllib.request.urlopen(host.rstrip("/") + "/metrics", timeout=timeout) as resp:
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
