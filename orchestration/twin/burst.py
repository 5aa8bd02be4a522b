"""What the fit takes from the probe's batch at scale (orchestration/twin/phases.py: batch_phase): B streams of the
longest prompt started together.

At concurrency 1 a GPU's prefill hides inside its step time: on vLLM 0.26 on an H200 (a 1 B model, eager), TTFT
was 25-50 ms at 30 tokens and at 1,400 alike, and the line through those points said 267k ± 592k tok/s, so the
twin spent ~4 ms of every step on a 1,024-token prefill that cost the GPU well under 1 ms, and its SLO search said
45 req/s where vLLM held 68-82. A burst puts B × L prompt tokens through the scheduler at once: the last stream's
first token comes after all of them, which measures the prefill cost per token at scale. While every stream
decodes (after the last first token, before the first stream ends) the batch is B over B × L tokens of context: a
TPOT point far out on the context axis, which pins the decode cost per context token.

The prediction replays the simulator's own scheduler (chunked prefill within `max_num_batched_tokens`, decode
tokens first, FCFS) with the simulator's own step cost (vllm_sim.engine.step_seconds), so the twin reproduces the
burst it was fitted to.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from vllm_sim.config import SimConfig
from vllm_sim.engine import prefill_pairs, step_seconds

__all__ = ["burst_seconds_per_token", "replay_last_ttft_s", "step_config"]

_MAX_STEPS = 100_000
# the step costs beside the prefill rate (SimConfig fields, the twin's constants of the same names)
_STEP_COSTS = ("decode_step_ms", "decode_per_seq_ms", "decode_per_ctx_token_us", "prefill_per_ctx_token_ns")


def step_config(c: dict[str, dict[str, Any]]) -> SimConfig:
    """The simulator's configuration with the twin's step costs `c` (an optional one absent: 0)."""

    def v(name: str) -> float:
        return float((c.get(name) or {}).get("value") or 0.0)

    return dataclasses.replace(
        SimConfig(), decode_step_ms=v("decode_step_ms"), decode_per_seq_ms=v("decode_per_seq_ms"),
        decode_per_ctx_token_us=v("decode_per_ctx_token_us"),
        prefill_tokens_per_s=v("prefill_tokens_per_s") or SimConfig().prefill_tokens_per_s,
        prefill_per_ctx_token_ns=v("prefill_per_ctx_token_ns"))


def replay_last_ttft_s(
    cfg: SimConfig, streams: int, prompt: int, output: int, offsets_s: list[float] | None = None
) -> float:
    """The longest TTFT the simulator gives `streams` prompts of `prompt` tokens sent at `offsets_s` (seconds
    after the first; all at once when None), the request overhead not included: its scheduler, step by step. An
    idle engine starts a step on the first arrival, and the rest wait for it to end: on the simulator, a burst
    of 4 x 1536 tokens at 5000 tok/s took one more step than "all at once" says (the fitted rate 2.8 % low)."""
    arr = sorted(offsets_s) if offsets_s and len(offsets_s) == streams else [0.0] * streams
    computed, done = [0] * streams, [0] * streams
    first: list[float | None] = [None] * streams
    t = arr[0]
    for _ in range(_MAX_STEPS):
        if all(f is not None for f in first):
            break
        dec = [i for i in range(streams) if first[i] is not None and done[i] < output]
        budget = cfg.max_num_batched_tokens - len(dec)
        chunks: list[tuple[int, int]] = []
        tokens = pairs = 0
        for i in range(streams):
            if first[i] is None and arr[i] <= t and budget > 0:
                ch = min(prompt - computed[i], budget)
                budget -= ch
                tokens += ch
                pairs += prefill_pairs(computed[i], ch)
                chunks.append((i, ch))
        if not dec and not chunks:  # idle until the next arrival
            t = min(a for a, f in zip(arr, first, strict=True) if f is None)
            continue
        ctx = sum(prompt + done[i] for i in dec)
        t += step_seconds(cfg, len(dec) + len(chunks), ctx, tokens, pairs)
        for i in dec:
            done[i] += 1
        for i, ch in chunks:
            computed[i] += ch
            if computed[i] >= prompt:
                first[i], done[i] = t, 1
    return max((f or t) - a for f, a in zip(first, arr, strict=True))


def burst_seconds_per_token(
    c: dict[str, dict[str, Any]], bursts: list[dict[str, Any]], excess_ms: float, unseen_rate: float
) -> tuple[float, float] | None:
    """Seconds per prefill token that make the replay's last TTFT the measured one, with the twin's other
    constants `c` (overhead included): the mean over the bursts, and its uncertainty in the same unit: what the
    other constants' uncertainties move it by (each one's shift of the replay's fixed part, over the burst's
    tokens), or 3 standard errors over the bursts, whichever is larger. None: no burst."""
    cfg = step_config(c)
    xs, us = [], []
    for b in bursts:
        s, p, n = int(b["streams"]), max(1, round(b["prompt_tokens"])), int(b["output_tokens"])
        offsets = [o / 1000.0 for o in b.get("offsets_ms") or []]
        target = (b["last_ttft_ms"] - c["request_overhead_ms"]["value"] - excess_ms) / 1000.0

        def at(x: float, base: SimConfig = cfg, s: int = s, p: int = p, n: int = n,
               offsets: list[float] = offsets) -> float:  # fmt: skip
            rate = 1.0 / x if x > 0 else unseen_rate
            return replay_last_ttft_s(dataclasses.replace(base, prefill_tokens_per_s=rate), s, p, n, offsets)

        x = 0.0
        if at(0.0) < target:
            lo, hi = 0.0, 1e-6
            for _ in range(60):  # bounded: 1 µs doubled 60 times is far past any server
                if at(hi) >= target:
                    break
                lo, hi = hi, hi * 2.0
            for _ in range(30):
                mid = (lo + hi) / 2.0
                lo, hi = (mid, hi) if at(mid) < target else (lo, mid)
            x = (lo + hi) / 2.0
        xs.append(x)
        shifts = [float(c["request_overhead_ms"].get("uncertainty") or 0.0) / 1000.0]
        for name in _STEP_COSTS:
            u = float((c.get(name) or {}).get("uncertainty") or 0.0)
            if u:
                shifted = dataclasses.replace(cfg, **{name: getattr(cfg, name) + u})
                shifts.append(at(x, shifted) - at(x))
        us.append(math.hypot(*shifts) / (s * p))
    if not xs:
        return None
    sem = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0.0
    # the constants' uncertainties move every burst alike: their share does not shrink with more bursts
    return statistics.mean(xs), max(statistics.mean(us), 3.0 * sem)
