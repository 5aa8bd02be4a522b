"""Crafted run directories for report tests: records with known latencies, server metric samples, CSVs."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from vllm_users.measure.record import RequestRecord
from vllm_users.measure.result_builder import write_result


def make_records(
    n: int = 200,
    *,
    ttft_ms: float = 20.0,
    itl_ms: float = 10.0,
    tokens: int = 16,
    fail: int = 0,
    tail_every: int = 0,
    tail_ms: float = 2000.0,
    scenario: str = "chat",
    concurrency: int = 8,
    cached_fraction: float | None = None,
    turns: int = 0,
    seed: int = 0,
    t0: float = 1_700_000_000.0,
) -> list[RequestRecord]:
    """Closed-loop-looking records: `concurrency` lanes back to back; every `tail_every`-th TTFT is slow."""
    rng = np.random.default_rng(seed)
    out: list[RequestRecord] = []
    lane_t = [t0] * concurrency
    for i in range(n):
        lane = i % concurrency
        ttft = ttft_ms * (1 + 0.1 * rng.random())
        if tail_every and i % tail_every == 0:
            ttft = tail_ms
        chunks = [int((ttft + k * itl_ms) * 1000) for k in range(tokens)]
        failed = i < fail
        r = RequestRecord(
            scenario=scenario,
            worker="w0",
            user=lane,
            seq=i,
            endpoint="chat",
            t_start=lane_t[lane],
            chunk_times_us=[] if failed else chunks,
            end_us=chunks[-1] + 500,
            prompt_tokens=None if failed else 100,
            output_tokens=None if failed else tokens,
            cached_tokens=None if cached_fraction is None or failed else int(100 * cached_fraction),
            status=500 if failed else 200,
            error="http" if failed else None,
            finish_reason=None if failed else "length",
            turn=(i // concurrency) % turns if turns else None,
            input_len=100,
            output_len=tokens,
        )
        lane_t[lane] += (chunks[-1] + 600) / 1e6
        out.append(r)
    return out


def server_samples(
    n: int = 10,
    *,
    t0: float = 1_700_000_000.0,
    hits_ratio: float = 0.8,
    gpu_util: float | None = None,
    kv_peak: float = 0.6,
    gen_tokens: float = 3200.0,
) -> list[dict[str, Any]]:
    """vLLM-shaped scrapes: counters rising linearly, a TTFT histogram of known buckets."""
    rows = []
    for i in range(n):
        f = i / (n - 1)
        v: dict[str, float] = {
            "vllm:num_requests_running": float(min(i, 4)),
            "vllm:num_requests_waiting": float(i % 3),
            "vllm:kv_cache_usage_perc": kv_peak * f,
            "vllm:prefix_cache_queries_total": 1000.0 * f,
            "vllm:prefix_cache_hits_total": 1000.0 * f * hits_ratio,
            "vllm:generation_tokens_total": gen_tokens * f,
            "vllm:time_to_first_token_seconds_count": 100.0 * f,
            "vllm:time_to_first_token_seconds_sum": 100.0 * f * 0.015,
            "vllm:time_to_first_token_seconds_bucket|0.01": 0.0,
            "vllm:time_to_first_token_seconds_bucket|0.02": 100.0 * f,
            "vllm:time_to_first_token_seconds_bucket|+Inf": 100.0 * f,
        }
        if gpu_util is not None:
            v["DCGM_FI_DEV_GPU_UTIL"] = gpu_util
        rows.append({"t": t0 + 2.0 * i, "v": v})
    return rows


def write_run(
    path: str,
    records: list[RequestRecord],
    *,
    meta: dict[str, Any] | None = None,
    samples: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """A run directory as `vllm-locust run` leaves it (records, run_meta, result, optional server samples)."""
    os.makedirs(path, exist_ok=True)
    m = {"model_id": "m", "endpoint": "chat", "users": 8, "input_len": 100, "output_len": 16}
    m.update(meta or {})
    with open(os.path.join(path, "records.jsonl"), "w") as fh:
        for r in records:
            fh.write(r.to_json() + "\n")
    with open(os.path.join(path, "run_meta.json"), "w") as fh:
        json.dump(m, fh)
    write_result(path, m, extra)
    if samples is not None:
        with open(os.path.join(path, "server_metrics.jsonl"), "w") as fh:
            for s in samples:
                fh.write(json.dumps(s) + "\n")
    return path


LOCUST_STATS = """Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,100%
POST,/v1/chat/completions,100,2,110,123.4,50,900,10,10.0,0.2,110,120,130,140,150,200,300,400,900,900,900
,Aggregated,100,2,110,123.4,50,900,10,10.0,0.2,110,120,130,140,150,200,300,400,900,900,900
"""
