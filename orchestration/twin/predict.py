"""What the twin predicts for each of the probe's points, and its error there: the fit table's columns.

A prediction is the twin's model with the fitted constants plus what the twin's own path adds on this machine (the
fit took that out of the points; the twin adds it back when it serves). Behind an API-server stage a TPOT point is
replayed through the stage (api_replay.py), not read off its steady state.
"""

from __future__ import annotations

import math
from typing import Any

from orchestration.twin.api_replay import replay_api_tpot_ms
from orchestration.twin.apistage import admissions_per_step, engine_bound_burst, measured_seats, predict_api
from orchestration.twin.burst import replay_last_ttft_s, step_config
from orchestration.twin.ownpath import tpot_excess
from vllm_sim.config import SimConfig

__all__ = ["optional_value", "point_errors", "predict_tpot_ms", "predict_ttft_ms", "ttft_excess"]

_DEFAULTS = SimConfig()


def optional_value(c: dict[str, Any], name: str) -> float:
    """An optional constant's value (vllm_sim.twin.OPTIONAL): 0, the model without it, when absent."""
    return float((c.get(name) or {}).get("value") or 0.0)


def predict_ttft_ms(c: dict[str, Any], prompt_tokens: float) -> float:
    """The twin's TTFT of one request alone on the server (chunked prefill: one step per token budget; the
    chunks' token pairs sum to the whole prompt's, P(P-1)/2)."""
    budget = (c.get("max_num_batched_tokens") or {}).get("value") or _DEFAULTS.max_num_batched_tokens
    steps = max(1, math.ceil(prompt_tokens / budget))
    step = c["decode_step_ms"]["value"] + c["decode_per_seq_ms"]["value"]
    pairs = prompt_tokens * (prompt_tokens - 1) / 2.0
    api = 0.0
    if optional_value(c, "api_server_count") > 0:  # a lone request's own work on the API server (apistage.py)
        api = (
            optional_value(c, "api_request_cost_us")
            + optional_value(c, "api_prompt_token_cost_us") * prompt_tokens
            + optional_value(c, "api_chunk_cost_us")
        ) / 1000.0
    return float(
        api
        + c["request_overhead_ms"]["value"]
        + steps * step
        + 1000.0 * prompt_tokens / c["prefill_tokens_per_s"]["value"]
        + optional_value(c, "prefill_per_ctx_token_ns") * pairs / 1e6
    )


def predict_tpot_ms(
    c: dict[str, Any],
    batch: float,
    context_tokens: float = 0.0,
    admissions: float = 0.0,
    prompt_tokens: float = 0.0,
) -> float:
    """The twin's time per output token in a batch of `batch` decoding sequences holding `context_tokens` in all,
    with `admissions` requests of `prompt_tokens` taken in by the API server per step meanwhile."""
    per_ctx_us = optional_value(c, "decode_per_ctx_token_us")
    engine = (
        c["decode_step_ms"]["value"]
        + c["decode_per_seq_ms"]["value"] * batch
        + per_ctx_us * context_tokens / 1000.0
    )
    n = optional_value(c, "api_server_count")
    # the API server writes one chunk per stream per step and takes in the arriving requests: past its rate, the
    # streams wait for it instead
    api = 0.0
    if n > 0:
        request_us = (
            optional_value(c, "api_request_cost_us")
            + optional_value(c, "api_prompt_token_cost_us") * prompt_tokens
        )
        chunk_us = optional_value(c, "api_chunk_cost_us")
        api = (batch * chunk_us + admissions * (request_us + chunk_us)) / 1000.0 / n
    return float(max(engine, api))


def ttft_excess(raw: dict[str, Any]) -> float:
    """What the simulator's own path adds to a TTFT on this machine (ownpath.path_latency; 0 unmeasured)."""
    return float(((raw.get("path_latency") or {}).get("ttft") or {}).get("excess_ms") or 0.0)


def _own_ttft_ms(raw: dict[str, Any], prompt_tokens: float) -> float:
    """What the twin's own path adds to a TTFT of `prompt_tokens` on this machine (the fit took it out)."""
    path = (raw.get("path_latency") or {}).get("ttft") or {}
    per_token = float(path.get("per_token_ms") or 0.0)
    return ttft_excess(raw) + per_token * (prompt_tokens - float(path.get("at_tokens") or 0.0))


def _served_tpot_ms(c: dict[str, Any], p: dict[str, Any], seats: int | None) -> float:
    """The twin's TPOT for TPOT point `p`: with an API-server stage, the point's burst replayed through it (the
    steady state overstates a 48-token burst: 15.7 against 9.9 ms at 116 streams); without, the engine's step."""
    n = int(optional_value(c, "api_server_count"))
    if n > 0 and p.get("output_tokens") and p.get("concurrency"):
        prompt = float(p.get("prompt_tokens") or 0.0)
        got = replay_api_tpot_ms(
            step_config(c),
            int(p["concurrency"]),
            max(1, round(prompt)),
            int(p["output_tokens"]),
            processes=n,
            request_us=optional_value(c, "api_request_cost_us")
            + optional_value(c, "api_prompt_token_cost_us") * prompt,
            chunk_us=optional_value(c, "api_chunk_cost_us"),
            seats=seats or int((c.get("max_num_seqs") or {}).get("value") or 0) or None,
            batch=int(p["batch"]),
        )
        if got is not None:
            return got
    return predict_tpot_ms(
        c,
        p["batch"],
        p.get("context_tokens") or 0.0,
        admissions_per_step(p, seats),
        p.get("prompt_tokens") or 0.0,
    )


def point_errors(raw: dict[str, Any], c: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Each raw point with the twin's prediction and its error (ms and % of the measured value). A prediction is
    the model's plus what the twin's own path adds on this machine, as when it serves (the fit took that out of
    the points: on a busy 2-core box it measured 0.4 ms a token at one stream, and the table without it read the
    one-stream points ~30 % fast)."""

    def err(measured: float, predicted: float) -> dict[str, float]:
        return {
            "predicted_ms": round(predicted, 3),
            "error_ms": round(predicted - measured, 3),
            "error_pct": round(100.0 * (predicted - measured) / measured, 2) if measured else 0.0,
        }

    ttft = [
        {
            **p,
            **err(
                p["ttft_ms"], predict_ttft_ms(c, p["prompt_tokens"]) + _own_ttft_ms(raw, p["prompt_tokens"])
            ),
        }
        for p in raw.get("ttft") or []
    ]
    seats = measured_seats(raw)
    path = raw.get("path_latency")
    tpot = [
        {**p, **err(p["tpot_ms"], _served_tpot_ms(c, p, seats) + tpot_excess(path, float(p["batch"])))}
        for p in raw.get("tpot") or []
    ]
    excess = ttft_excess(raw)
    bursts = []
    for b in raw.get("bursts") or []:
        last = 1000.0 * replay_last_ttft_s(
            step_config(c),
            int(b["streams"]),
            max(1, round(b["prompt_tokens"])),
            int(b["output_tokens"]),
            [o / 1000.0 for o in b.get("offsets_ms") or []],
        )
        bursts.append({**b, **err(b["last_ttft_ms"], c["request_overhead_ms"]["value"] + excess + last)})
    api = []
    for p in raw.get("api") or []:
        got = predict_api(c, p)
        # a twin without the stage predicts no API-server throughput; the engine's own bursts are the engine's,
        # judged by the points above
        if got is not None and not engine_bound_burst(p):
            key = "per_chunk_ms" if p["kind"] == "chunk" else "per_request_ms"
            api.append({**p, **err(p[key], got)})
    return {"ttft": ttft, "tpot": tpot, "bursts": bursts, "api": api}
