"""`--gpu-hour-price USD --gpus N` for the sweep/search steps (the arithmetic, the result's `cost` block and its
summary lines: vllm_users.measure.cost)."""

from __future__ import annotations

from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.measure.cost import cost_at


def add_step_costs(steps: list[dict[str, Any]], price: float | None, gpus: int) -> None:
    """Sweep/search steps: $ per million output tokens and $ per request at each step's achieved rate."""
    if not price:
        return
    for s in steps:
        c = cost_at(price, gpus, s.get(K.OUTPUT_THROUGHPUT), s.get("achieved_rate"))
        s["usd_per_million_output_tokens"], s["usd_per_request"] = (
            c["usd_per_million_output_tokens"],
            c["usd_per_request"],
        )
