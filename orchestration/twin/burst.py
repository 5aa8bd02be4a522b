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
from collections.abc import Sequence
from typing import Any

from vllm_sim.config import SimConfig
from vllm_sim.engine import prefill_pairs, step_seconds

__all__ = [
    "BUDGETS",
    "burst_seconds_per_token",
    "engine_step",
    "replay_last_ttft_s",
    "replay_ttfts_s",
    "staircase_rms_ms",
    "step_config",
]

_MAX_STEPS = 100_000
# the step costs beside the prefill rate (SimConfig fields, the twin's constants of the same names)
_STEP_COSTS = ("decode_step_ms", "decode_per_seq_ms", "decode_per_ctx_token_us", "prefill_per_ctx_token_ns")
# the token budgets (max_num_batched_tokens) the fit tries: vLLM's defaults (2048 on CPU and small GPUs, 8192 for
# the API server on a large GPU, 16384 offline) and the powers of two around them, which users set
BUDGETS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def step_config(c: dict[str, dict[str, Any]]) -> SimConfig:
    """The simulator's configuration with the twin's step costs `c` (an optional one absent: 0)."""

    def v(name: str) -> float:
        return float((c.get(name) or {}).get("value") or 0.0)

    return dataclasses.replace(
        SimConfig(),
        decode_step_ms=v("decode_step_ms"),
        decode_per_seq_ms=v("decode_per_seq_ms"),
        decode_per_ctx_token_us=v("decode_per_ctx_token_us"),
        prefill_tokens_per_s=v("prefill_tokens_per_s") or SimConfig().prefill_tokens_per_s,
        prefill_per_ctx_token_ns=v("prefill_per_ctx_token_ns"),
        max_num_batched_tokens=int(v("max_num_batched_tokens") or SimConfig().max_num_batched_tokens),
    )


def engine_step(
    cfg: SimConfig,
    prompt: int | Sequence[int],
    decoding: list[int],
    prefilling: list[int],
    computed: list[int],
    done: list[int],
) -> tuple[float, list[tuple[int, int]]]:
    """One step of the simulator's scheduler over sequences of `prompt` tokens (one length for all, or each
    sequence's own): every decoding sequence, then
    prefill chunks within the token budget, first come first served (`computed`: prompt tokens prefilled so far,
    `done`: tokens out so far). Its duration (s, vllm_sim.engine.step_seconds) and its chunks (sequence, tokens)."""
    budget = cfg.max_num_batched_tokens - len(decoding)
    chunks: list[tuple[int, int]] = []
    tokens = pairs = 0

    def length(i: int) -> int:
        return prompt if isinstance(prompt, int) else prompt[i]

    for i in prefilling:
        if budget <= 0:
            break
        ch = min(length(i) - computed[i], budget)
        budget, tokens = budget - ch, tokens + ch
        pairs += prefill_pairs(computed[i], ch)
        chunks.append((i, ch))
    ctx = sum(length(i) + done[i] for i in decoding)
    return step_seconds(cfg, len(decoding) + len(chunks), ctx, tokens, pairs), chunks


def replay_ttfts_s(
    cfg: SimConfig, streams: int, prompt: int, output: int, offsets_s: list[float] | None = None
) -> list[float]:
    """Each stream's TTFT (in arrival order; the request overhead not included) when the simulator gets `streams`
    prompts of `prompt` tokens sent at `offsets_s` (seconds after the first; all at once when None): its
    scheduler, step by step. An idle engine starts a step on the first arrival, and the rest wait for it to end:
    on the simulator, a burst of 4 x 1536 tokens at 5000 tok/s took one more step than "all at once" says (the
    fitted rate 2.8 % low)."""
    arr = sorted(offsets_s) if offsets_s and len(offsets_s) == streams else [0.0] * streams
    computed, done = [0] * streams, [0] * streams
    first: list[float | None] = [None] * streams
    t = arr[0]
    for _ in range(_MAX_STEPS):
        if all(f is not None for f in first):
            break
        dec = [i for i in range(streams) if first[i] is not None and done[i] < output]
        waiting = [i for i in range(streams) if first[i] is None and arr[i] <= t]
        if not dec and not waiting:  # idle until the next arrival
            t = min(a for a, f in zip(arr, first, strict=True) if f is None)
            continue
        dur, chunks = engine_step(cfg, prompt, dec, waiting, computed, done)
        t += dur
        for i in dec:
            done[i] += 1
        for i, ch in chunks:
            computed[i] += ch
            if computed[i] >= prompt:
                first[i], done[i] = t, 1
    return [(f or t) - a for f, a in zip(first, arr, strict=True)]


def replay_last_ttft_s(
    cfg: SimConfig, streams: int, prompt: int, output: int, offsets_s: list[float] | None = None
) -> float:
    """The longest of `replay_ttfts_s`: the burst's last first token after its own arrival."""
    return max(replay_ttfts_s(cfg, streams, prompt, output, offsets_s))


def staircase_rms_ms(cfg: SimConfig, bursts: list[dict[str, Any]], fixed_ms: float) -> float | None:
    """How far the replay's first tokens are from the measured ones, each burst's streams in order of their first
    token (ms, root mean square over all streams; `fixed_ms`: what the twin adds to every TTFT outside its
    engine). The token budget shows here: under it, streams come out one step after another; above the burst's
    tokens, all together. None: no burst kept every stream's TTFT (a profile from before `ttfts_ms`)."""
    sq, n = 0.0, 0
    for b in bursts:
        measured, offsets = b.get("ttfts_ms"), b.get("offsets_ms") or []
        if not measured or len(measured) != len(offsets):
            continue
        got = replay_ttfts_s(
            cfg,
            len(measured),
            max(1, round(b["prompt_tokens"])),
            int(b["output_tokens"]),
            [o / 1000.0 for o in offsets],
        )
        # finishing times since the first send, so that a stream's order of arrival needs no matching
        real = sorted(o + t for o, t in zip(offsets, measured, strict=True))
        twin = sorted(o + fixed_ms + 1000.0 * t for o, t in zip(sorted(offsets), got, strict=True))
        sq += sum((x - y) ** 2 for x, y in zip(real, twin, strict=True))
        n += len(real)
    return math.sqrt(sq / n) if n else None


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

        def at(
            x: float,
            base: SimConfig = cfg,
            s: int = s,
            p: int = p,
            n: int = n,
            offsets: list[float] = offsets,
        ) -> float:
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
