"""Fit the simulator's constants to a probe's raw points, with an uncertainty for each (the error per point:
predict.py).

The model is the simulator's own (docs/simulator.md, "Latency model"): at concurrency 1 a prompt of P uncached
tokens gets its first token after one step, `request_overhead + decode_step + decode_per_seq + P / prefill_rate +
prefill_per_ctx_token * P(P-1)/2`, and a batch of b decoding sequences over C context tokens in all takes
`decode_step + decode_per_seq * b + decode_per_ctx_token * C` per token. Both are fitted by least squares: the
first as a curve in P (a straight line unless its quadratic part is distinguishable from 0), the second as the
context phase's line in C, then a line in b under it (a plane in both for an older probe's points). An uncertainty
is 3 standard errors of the fit (about 99.7 % for normal noise), but never below what a 0.5 ms timing resolution
allows: a server that answers with no visible noise (the simulator) still has its points on a clock.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from orchestration.twin.apistage import (
    fit_api,
)
from orchestration.twin.burst import (
    BUDGETS,
    burst_seconds_per_token,
    staircase_rms_ms,
    step_config,
)
from orchestration.twin.fit_decode import const as _const
from orchestration.twin.fit_decode import decode_constants
from orchestration.twin.lsq import RESOLUTION_MS, SIGMAS, Line, linfit, planefit
from orchestration.twin.predict import optional_value, predict_ttft_ms, ttft_excess
from vllm_sim.config import SimConfig

__all__ = [
    "RESOLUTION_MS",
    "SIGMAS",
    "Line",
    "fit_constants",
    "linfit",
    "planefit",
]

_DEFAULTS = SimConfig()
PAIR_UNIT = "ns/token²"  # prefill_per_ctx_token_ns: per prefilled token, per token before it
# tok/s where TTFT shows no cost per token beside its quadratic part: too fast to see (as ownpath.path_latency's)
UNSEEN_RATE = 1e12


def _ttft_curve(xs: list[float], ys: list[float]) -> tuple[Line, dict[str, Any]]:
    """TTFT against the prompt length P as `a + b·P + q·P(P-1)/2` (prefill attention: each token attends over
    those before it) where q is above 0 and above its uncertainty at 3 prompt lengths or more; else the straight
    line, with q = 0 (`default`, its note says why). Returns (a and b as a Line, q's constant in ns);
    ValueError with fewer than 2 prompt lengths."""
    line = linfit(xs, ys)
    if len(set(xs)) < 3:
        return line, _const(0.0, None, PAIR_UNIT, "default", "fewer than 3 prompt lengths: no curvature")
    pairs = [x * (x - 1) / 2.0 for x in xs]
    try:
        coef, se, sd = planefit(list(zip(xs, pairs, strict=True)), ys)
    except ValueError:
        return line, _const(0.0, None, PAIR_UNIT, "default", "too few TTFT points for a curvature")
    uq = max(SIGMAS * se[2], RESOLUTION_MS / (max(pairs) - min(pairs)))
    if not coef[2] > uq:  # a curvature within the noise would be overfitting: the line, as before the term
        return line, _const(
            0.0,
            None,
            PAIR_UNIT,
            "default",
            f"not distinguishable from 0: {1e6 * coef[2]:.3g} ± {1e6 * uq:.3g} {PAIR_UNIT}",
        )
    if coef[1] <= 0:
        # no cost per token left beside the curvature: b = 0, and TTFT is a line in the token pairs
        bent = linfit(pairs, ys)
        note = f"the cost per token beside it came out {coef[1]:.3g} ms (not above 0): a + q·P(P-1)/2"
        return Line(bent.a, 0.0, bent.ua, 0.0, bent.n, bent.resid_sd), _const(
            1e6 * bent.b, 1e6 * bent.ub, PAIR_UNIT, "fit", note
        )
    ua, ub = max(SIGMAS * se[0], RESOLUTION_MS), max(SIGMAS * se[1], RESOLUTION_MS / (max(xs) - min(xs)))
    return Line(coef[0], coef[1], ua, ub, len(xs), sd), _const(1e6 * coef[2], 1e6 * uq, PAIR_UNIT, "fit")


def _prefill(
    raw: dict[str, Any], c: dict[str, Any], budget: int = _DEFAULTS.max_num_batched_tokens
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], float | None]:
    """prefill_tokens_per_s, request_overhead_ms and prefill_per_ctx_token_ns from the TTFT points, and the
    curve's intercept (None: no curve). A prompt over the token `budget` is prefilled in more than one step: each
    step after the first is taken out of its TTFT before the fit (at a budget of 1,024, the step of a 1,400-token
    prompt's second chunk read as a quadratic term of 31 ns per token pair)."""
    pts = raw.get("ttft") or []
    path = (raw.get("path_latency") or {}).get("ttft") or {}
    per_token = float(
        path.get("per_token_ms") or 0.0
    )  # the twin's own cost per prompt token: it adds it back
    step = c["decode_step_ms"]["value"] + c["decode_per_seq_ms"]["value"]
    xs = [float(p["prompt_tokens"]) for p in pts]
    ys = [
        float(p["ttft_ms"])
        - per_token * (float(p["prompt_tokens"]) - float(path.get("at_tokens") or 0))
        - (max(1, math.ceil(float(p["prompt_tokens"]) / budget)) - 1) * step
        for p in pts
    ]
    try:
        line, per_pair = _ttft_curve(xs, ys)
    except ValueError:
        return (
            _const(_DEFAULTS.prefill_tokens_per_s, None, "tok/s", "default"),
            _const(0.0, None, "ms", "default"),
            _const(0.0, None, PAIR_UNIT, "default", "no TTFT points at two prompt lengths"),
            None,
        )
    if line.b <= 0 and per_pair["source"] == "fit":
        rate = _const(UNSEEN_RATE, None, "tok/s", "fit", "no cost per token seen beside the quadratic term")
    elif line.b <= 0:
        rate = _const(
            _DEFAULTS.prefill_tokens_per_s,
            None,
            "tok/s",
            "default",
            "TTFT did not grow with the prompt: prefill too fast to see at these lengths",
        )
    else:
        ub = math.hypot(line.ub, per_token)  # the correction is known to about its own size
        rate = _const(1000.0 / line.b, 1000.0 * ub / line.b**2, "tok/s", "fit")
    u_step = math.hypot(
        c["decode_step_ms"]["uncertainty"] or 0.0, c["decode_per_seq_ms"]["uncertainty"] or 0.0
    )
    excess = float(path.get("excess_ms") or 0.0)
    overhead = line.a - step - excess  # the twin's own path adds that back when it serves
    u_step = math.hypot(u_step, excess)  # known to about its own size (as the TPOT correction, above)
    note = None if overhead >= 0 else f"the fit said {overhead:.2f} ms (below 0): 0"
    return rate, _const(max(overhead, 0.0), math.hypot(line.ua, u_step), "ms", "fit", note), per_pair, line.a


def _limits(raw: dict[str, Any], server: dict[str, Any]) -> dict[str, dict[str, Any]]:
    sat = raw.get("saturation") or {}
    out: dict[str, dict[str, Any]] = {}
    seats = sat.get("max_running_while_waiting")
    if seats:
        out["max_num_seqs"] = _const(
            int(seats), 0.0, "sequences", "measured", "most requests running while others waited (/metrics)"
        )
    elif sat.get("max_running"):
        out["max_num_seqs"] = _const(
            max(int(sat["max_running"]), _DEFAULTS.max_num_seqs),
            None,
            "sequences",
            "lower_bound",
            f"{int(sat['max_running'])} ran at once and none waited: "
            "the limit is higher; the value is vLLM's default or what ran",
        )
    else:
        out["max_num_seqs"] = _const(_DEFAULTS.max_num_seqs, None, "sequences", "default")
    cc = sat.get("cache_config")
    block = int(cc["block_size"]) if cc else _DEFAULTS.block_size
    out["block_size"] = _const(block, 0.0, "tokens", "metrics" if cc else "default")
    samples = [s for s in sat.get("kv_samples") or [] if s["usage"] >= 0.02]
    if cc:
        out["kv_cache_tokens"] = _const(
            int(cc["num_gpu_blocks"]) * block,
            0.0,
            "tokens",
            "metrics",
            "vllm:cache_config_info num_gpu_blocks x block_size",
        )
    elif samples:
        est = [s["held_tokens"] / s["usage"] for s in samples]
        # each running stream may hold one block more or less than counted (a token in flight)
        rounding = max(s["running"] * block / s["usage"] for s in samples)
        sem = statistics.stdev(est) / math.sqrt(len(est)) if len(est) > 1 else 0.0
        out["kv_cache_tokens"] = _const(
            int(statistics.median(est)),
            max(SIGMAS * sem, rounding),
            "tokens",
            "fit",
            "tokens held by the running streams / vllm:kv_cache_usage_perc",
        )
    else:
        out["kv_cache_tokens"] = _const(_DEFAULTS.kv_cache_tokens, None, "tokens", "default")
    mml = server.get("max_model_len")
    out["max_model_len"] = (
        _const(int(mml), 0.0, "tokens", "server", "/v1/models")
        if mml
        else _const(_DEFAULTS.max_model_len, None, "tokens", "default")
    )
    return out


def _prefix(raw: dict[str, Any], intercept: float | None) -> dict[str, Any]:
    pts = raw.get("prefix") or []
    config = [str(p["config"]).lower() for p in pts if p.get("config") is not None]
    if config:  # vllm:cache_config_info's label: the server's own setting
        return _const(
            config[-1] == "true",
            None,
            "",
            "metrics",
            f"vllm:cache_config_info enable_prefix_caching={config[-1]}",
        )
    counted = [p for p in pts if p.get("cached_tokens") is not None and p.get("prompt_tokens")]
    if counted:  # vllm:prefix_cache_hits: the tokens the second request took from the cache
        hit = sum(p["cached_tokens"] >= 0.5 * p["prompt_tokens"] for p in counted)
        return _const(
            hit * 2 > len(counted),
            None,
            "",
            "metrics",
            f"the same prompt again: {hit} of "
            f"{len(counted)} took half of it or more from the cache (vllm:prefix_cache_hits)",
        )
    if not pts or intercept is None:
        return _const(True, None, "", "default")
    hits = 0
    for p in pts:
        prefill_part = p["cold_ms"] - intercept
        hits += prefill_part > 0 and (p["cold_ms"] - p["warm_ms"]) > 0.5 * prefill_part
    benefit = statistics.median(1.0 - p["warm_ms"] / p["cold_ms"] for p in pts)
    return _const(
        hits * 2 > len(pts),
        None,
        "",
        "measured",
        f"the same prompt again: TTFT {100 * benefit:.0f} % lower ({hits} of {len(pts)} pairs a hit)",
    )


def _solve_bursts(
    raw: dict[str, Any], c: dict[str, dict[str, Any]], rounds: int
) -> tuple[float, float, dict[str, dict[str, Any]]] | None:
    """Seconds per prefill token from the bursts and its uncertainty, with the constants as the twin would have
    them (rate and overhead refitted together: `rounds` rounds, each moves the other a little)."""
    excess = ttft_excess(raw)
    trial = {**c, "request_overhead_ms": dict(c["request_overhead_ms"])}
    x = u = 0.0
    for _ in range(rounds):
        got = burst_seconds_per_token(trial, raw["bursts"], excess, UNSEEN_RATE)
        if got is None:
            return None
        x, u = got
        trial["prefill_tokens_per_s"] = _const(1.0 / x if x > 0 else UNSEEN_RATE, None, "tok/s", "burst")
        without = {**trial, "request_overhead_ms": _const(0.0, None, "ms", "fit")}
        rest = [p["ttft_ms"] - predict_ttft_ms(without, p["prompt_tokens"]) for p in raw["ttft"]]
        trial["request_overhead_ms"] = {
            **c["request_overhead_ms"],
            "value": max(statistics.mean(rest) - excess, 0.0),
        }
    return x, u, trial


def _budget(raw: dict[str, Any], c: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """max_num_batched_tokens from the bursts' staircase: the budget whose replay puts each stream's first token
    nearest the measured one (below the budget a burst's streams come out one step after another, above its
    tokens all together). vLLM's /metrics does not show it, and it differs by platform: 2,048 on vLLM for CPU,
    where a twin with the GPU's 8,192 prefilled two queued 1,536-token prompts in one step and delayed both."""
    default = _DEFAULTS.max_num_batched_tokens
    bursts = [b for b in raw.get("bursts") or [] if b.get("ttfts_ms")]
    tokens = max((b["streams"] * b["prompt_tokens"] for b in bursts), default=0.0)
    # a budget a burst would cross in more than 200 steps is not tried (each try replays every burst ~100 times)
    tried = [n for n in BUDGETS if tokens / n <= 200 or n == default]
    rms: dict[int, float] = {}
    excess = ttft_excess(raw)  # once: the same for every budget tried
    for n in tried if bursts and raw.get("ttft") else []:
        got = _solve_bursts(raw, {**c, "max_num_batched_tokens": _const(n, None, "tokens", "burst")}, 1)
        if got is None:
            break
        fixed = got[2]["request_overhead_ms"]["value"] + excess
        r = staircase_rms_ms(step_config(got[2]), bursts, fixed)
        if r is not None:
            rms[n] = r
    if default not in rms:
        return _const(default, None, "tokens", "default", "no burst kept each stream's first token")
    best = min(rms, key=lambda n: (rms[n], n != default))
    alike = [n for n in rms if rms[n] == rms[best]]  # budgets above a burst's tokens replay it alike
    note = (
        (f"any budget >= {min(alike)} replays the bursts alike; " if len(alike) > 1 else "")
        + "burst staircase rms error ms by budget: "
        + ", ".join(f"{n}: {rms[n]:.3g}" for n in sorted(rms))
    )
    if best != default and rms[best] <= 0.8 * rms[default]:  # another budget, only where clearly better
        return _const(min(alike), None, "tokens", "burst", note)
    return _const(default, None, "tokens", "burst" if alike == [default] else "default", note)


def _from_bursts(raw: dict[str, Any], c: dict[str, dict[str, Any]]) -> None:
    """The prefill rate from the batch bursts, where they know it better than the concurrency-1 line (a smaller
    uncertainty per token), and the overhead refitted to the TTFT points with it."""
    bursts = raw.get("bursts") or []
    rate = c["prefill_tokens_per_s"]
    if not bursts or not raw.get("ttft"):
        return
    known = rate["source"] == "fit" and rate["uncertainty"] is not None
    line_u = rate["uncertainty"] / rate["value"] ** 2 if known else math.inf
    got = _solve_bursts(raw, c, 3)
    if got is None:
        return
    x, u, trial = got
    if u >= line_u:
        return
    b = bursts[-1]
    note = (
        f"{len(bursts)} bursts of {b['streams']} x {b['prompt_tokens']:.0f} tokens (last first token "
        f"{b['last_ttft_ms']:.1f} ms); the concurrency-1 line said {rate['value']:.4g}"
        + (f" ± {rate['uncertainty']:.3g}" if known else "")
    )
    # the value the overhead was refitted with, however uncertain (the table flags it when u >= x): "free"
    # instead of an uncertain 21 ± 24 µs/token made the twin's bursts 35 % short on vLLM for CPU
    c["prefill_tokens_per_s"] = (
        _const(1.0 / x, u / x**2, "tok/s", "burst", note)
        if x > 0
        else _const(UNSEEN_RATE, None, "tok/s", "burst", "no cost per token seen; " + note)
    )
    c["request_overhead_ms"] = trial["request_overhead_ms"]


def fit_constants(raw: dict[str, Any], server: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every constant of the twin (vllm_sim.twin.CONSTANTS): value, uncertainty, unit and where it came from."""
    c: dict[str, dict[str, Any]] = {}
    c["decode_step_ms"], c["decode_per_seq_ms"], c["decode_per_ctx_token_us"] = decode_constants(raw)
    rate, overhead, per_pair, intercept = _prefill(raw, c)
    c["prefill_tokens_per_s"], c["prefill_per_ctx_token_ns"] = rate, per_pair
    c["request_overhead_ms"] = overhead
    c["max_num_batched_tokens"] = _budget(raw, c)
    budget = int(c["max_num_batched_tokens"]["value"])
    if budget != _DEFAULTS.max_num_batched_tokens:  # the line again, its prompts' extra chunk steps taken out
        rate, overhead, per_pair, intercept = _prefill(raw, c, budget)
        c["prefill_tokens_per_s"], c["prefill_per_ctx_token_ns"] = rate, per_pair
        c["request_overhead_ms"] = overhead
    _from_bursts(raw, c)
    c.update(_limits(raw, server))
    c["enable_prefix_caching"] = _prefix(raw, intercept)
    api, _ = fit_api(raw, int(raw.get("api_processes") or 1))
    if api:
        _without_api(c, api)
    return c


def _without_api(c: dict[str, dict[str, Any]], api: dict[str, dict[str, Any]]) -> None:
    """Add the API-server constants and take their share out of the concurrency-1 TTFT line's: a lone request
    pays the per-request, per-prompt-token and first-chunk costs, which the twin's stage adds back when it serves
    (else a lone TTFT would count them twice)."""
    c.update(api)
    a_ms = (optional_value(c, "api_request_cost_us") + optional_value(c, "api_chunk_cost_us")) / 1000.0
    oh = c["request_overhead_ms"]
    left = oh["value"] - a_ms
    note = f"{oh['value']:.3g} ms less the API server's {a_ms:.3g} ms per request and chunk"
    if left < 0:
        note += " (below 0: 0)"
    c["request_overhead_ms"] = {**oh, "value": max(left, 0.0), "note": note}
    b_s = optional_value(c, "api_prompt_token_cost_us") / 1e6
    rate = c["prefill_tokens_per_s"]
    # the bursts' rate is the engine's own: their requests' tokenizing overlapped the engine's prefill of those
    # before them, so it is not in the rate (subtracted, recording b's 251k tok/s became 492k, and the twin held
    # 175 req/s where vLLM held 96); the concurrency-1 line's is a sum, so it is taken out there
    if b_s > 0 and rate["value"] > 0 and rate["source"] != "burst":
        per = 1.0 / rate["value"] - b_s
        text = f"{rate['value']:.4g} tok/s less the API server's {1e6 * b_s:.3g} µs per prompt token"
        c["prefill_tokens_per_s"] = (
            {**rate, "value": 1.0 / per, "note": text}
            if per > 0
            else {**rate, "value": UNSEEN_RATE, "note": text + ": no prefill cost per token left"}
        )
