"""`--gpu-hour-price USD --gpus N`: what the measured throughput costs.

$ per million output tokens = price x gpus / (output tok/s x 3600) x 1e6, and $ per request = price x gpus /
(3600 x completed req/s): the deployment is paid by the hour whether busy or not, so a rate below capacity
costs more per token. Given at the measured rate (any run) and at the SLO-max rate (--find-max-rate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.measure.delivered import steady


def cost_at(
    price_per_gpu_hour: float, gpus: int, output_tok_per_s: float | None, req_per_s: float | None
) -> dict[str, Any]:
    """$ per million output tokens and $ per request at the given throughputs (None where a rate is 0 or unknown)."""
    per_s = price_per_gpu_hour * gpus / 3600.0
    return {
        "usd_per_million_output_tokens": per_s / output_tok_per_s * 1e6 if output_tok_per_s else None,
        "usd_per_request": per_s / req_per_s if req_per_s else None,
        "output_tok_per_s": output_tok_per_s,
        "request_rate": req_per_s,
    }


def run_cost(metrics: Mapping[str, Any], price: float, gpus: int) -> dict[str, Any]:
    """The result's `cost` block from its overall `metrics`: the inputs and the cost at the measured rate, the
    steady interior's where the run has one (measure.delivered: the ramp and the drain are no rate the
    deployment runs at), else the whole run's."""
    return {
        "gpu_hour_price_usd": price,
        "gpus": gpus,
        "at_measured_rate": cost_at(
            price,
            gpus,
            steady(dict(metrics), K.OUTPUT_THROUGHPUT),
            steady(dict(metrics), K.REQUEST_THROUGHPUT),
        ),
    }


def format_cost(cost: Mapping[str, Any]) -> list[str]:
    """Summary lines of a cost block."""
    out = [f"Cost at ${cost['gpu_hour_price_usd']:g}/GPU-hour x {cost['gpus']} GPU(s):"]
    for key, label in (("at_measured_rate", "measured rate"), ("at_slo_max_rate", "SLO-max rate")):
        c = cost.get(key)
        if c:
            tok = (
                "n/a"
                if c["usd_per_million_output_tokens"] is None
                else f"${c['usd_per_million_output_tokens']:.4g}"
            )
            req = "n/a" if c["usd_per_request"] is None else f"${c['usd_per_request']:.4g}"
            rate = "n/a" if c["request_rate"] is None else f"{c['request_rate']:.3g} req/s"
            out.append(f"  at the {label} ({rate}): {tok} per 1M output tokens, {req} per request")
    return out
