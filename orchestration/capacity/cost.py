"""`--gpu-hour-price USD --gpus N` in the summary, the report and the sweep/search steps (the arithmetic and the
result's `cost` block: vllm_users.measure.cost)."""

from __future__ import annotations

from typing import Any

from vllm_users.measure.cost import cost_at


def format_cost(cost: dict[str, Any]) -> list[str]:
    """Summary lines of a cost block."""
    out = [f"Cost at ${cost['gpu_hour_price_usd']:g}/GPU-hour x {cost['gpus']} GPU(s):"]
    for key, label in (("at_measured_rate", "measured rate"), ("at_slo_max_rate", "SLO-max rate")):
        c = cost.get(key)
        if c:
            tok = "n/a" if c["usd_per_million_output_tokens"] is None else f"${c['usd_per_million_output_tokens']:.4g}"
            req = "n/a" if c["usd_per_request"] is None else f"${c['usd_per_request']:.4g}"
            rate = "n/a" if c["request_rate"] is None else f"{c['request_rate']:.3g} req/s"
            out.append(f"  at the {label} ({rate}): {tok} per 1M output tokens, {req} per request")
    return out


def add_step_costs(steps: list[dict[str, Any]], price: float | None, gpus: int) -> None:
    """Sweep/search steps: $ per million output tokens and $ per request at each step's achieved rate."""
    if not price:
        return
    for s in steps:
        c = cost_at(price, gpus, s.get("output_throughput"), s.get("achieved_rate"))
        s["usd_per_million_output_tokens"], s["usd_per_request"] = c["usd_per_million_output_tokens"], c["usd_per_request"]
