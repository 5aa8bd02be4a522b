"""The fit of the simulator's constants: lines, uncertainties, corrections, limits and per-point errors."""

from __future__ import annotations

import random

import pytest

from orchestration.twin.fit import RESOLUTION_MS, fit_constants, linfit, point_errors, predict_ttft_ms
from orchestration.twin.phases import ProbePlan, tpot_excess


def test_linfit_recovers_a_line_and_its_noise() -> None:
    rng = random.Random(3)
    xs = [float(x) for x in range(1, 41)]
    ys = [2.0 + 0.5 * x + rng.gauss(0, 1.0) for x in xs]
    line = linfit(xs, ys)
    assert abs(line.a - 2.0) <= line.ua and abs(line.b - 0.5) <= line.ub
    assert 0.7 < line.resid_sd < 1.3 and line.ua > RESOLUTION_MS  # the noise, not the floor, sets it here
    with pytest.raises(ValueError):
        linfit([1.0, 1.0], [2.0, 3.0])


def test_a_noiseless_line_still_has_the_timing_resolution_as_uncertainty() -> None:
    line = linfit([0.0, 100.0, 200.0], [5.0, 15.0, 25.0])
    assert line.a == pytest.approx(5.0) and line.b == pytest.approx(0.1)
    assert line.ua == RESOLUTION_MS and line.ub == pytest.approx(RESOLUTION_MS / 200.0)


def _raw(step: float = 20.0, per: float = 1.0, rate: float = 5000.0, overhead: float = 10.0) -> dict:
    ttft = [
        {"prompt_tokens": n, "ttft_ms": overhead + step + per + 1000.0 * n / rate}
        for n in (32, 256, 768, 1536)
    ]
    tpot = [{"concurrency": b, "batch": b, "tpot_ms": step + per * b} for b in (1, 2, 4, 8, 12)]
    sat = {"requests": 64, "max_running": 12, "max_running_while_waiting": 12,
           "kv_samples": [{"usage": 0.25, "held_tokens": 5000, "running": 12},
                          {"usage": 0.5, "held_tokens": 10000, "running": 12}]}  # fmt: skip
    prefix = [{"prompt_tokens": 1536, "cold_ms": 338.2, "warm_ms": 35.0}]
    return {
        "ttft": ttft,
        "tpot": tpot,
        "saturation": sat,
        "prefix": prefix,
        "errors": {},
        "path_latency": None,
    }


def test_fit_constants_recovers_exact_points() -> None:
    c = fit_constants(_raw(), {"max_model_len": 6000})
    assert c["decode_step_ms"]["value"] == pytest.approx(20.0)
    assert c["decode_per_seq_ms"]["value"] == pytest.approx(1.0)
    assert c["prefill_tokens_per_s"]["value"] == pytest.approx(5000.0)
    assert c["request_overhead_ms"]["value"] == pytest.approx(10.0)
    assert c["max_num_seqs"] == {"value": 12, "uncertainty": 0.0, "unit": "sequences", "source": "measured",
                                 "note": "most requests running while others waited (/metrics)"}  # fmt: skip
    assert c["kv_cache_tokens"]["value"] == 20000 and c["kv_cache_tokens"]["source"] == "fit"
    assert c["max_model_len"]["value"] == 6000 and c["enable_prefix_caching"]["value"] is True
    errs = point_errors(_raw(), c)
    assert all(abs(p["error_ms"]) < 1e-6 for p in errs["ttft"] + errs["tpot"])


def test_the_twins_own_path_is_taken_out_and_counted_in_the_uncertainty() -> None:
    raw = _raw()
    for p in raw["tpot"]:  # the server's points carry the simulator's own drift (1 ms at 1, 2 ms at 16)
        p["tpot_ms"] += 1.0 + (p["batch"] - 1) / 15.0
    for p in raw["ttft"]:  # ... and its parsing and tokenizing: 3 ms at 32 tokens, 1 µs per token more
        p["ttft_ms"] += 3.0 + 0.001 * (p["prompt_tokens"] - 32)
    raw["path_latency"] = {"ttft": {"excess_ms": 3.0, "spread_ms": 0.5, "n": 12, "per_token_ms": 0.001, "at_tokens": 32},
                           "tpot": [{"batch": 1, "excess_ms": 1.0}, {"batch": 16, "excess_ms": 2.0}]}  # fmt: skip
    c = fit_constants(raw, {})
    assert c["decode_step_ms"]["value"] == pytest.approx(20.0)
    assert c["decode_per_seq_ms"]["value"] == pytest.approx(1.0)
    assert c["request_overhead_ms"]["value"] == pytest.approx(10.0)
    assert c["prefill_tokens_per_s"]["value"] == pytest.approx(5000.0)
    assert c["decode_step_ms"]["uncertainty"] >= 1.0 and c["request_overhead_ms"]["uncertainty"] >= 3.0
    assert tpot_excess(raw["path_latency"], 8.5) == pytest.approx(1.5) and tpot_excess(None, 4) == 0.0


def test_limits_not_reached_are_lower_bounds_and_missing_ones_defaults() -> None:
    raw = _raw()
    raw["saturation"] = {
        "requests": 64,
        "max_running": 64,
        "max_running_while_waiting": None,
        "kv_samples": [],
    }
    raw["tpot"] = []
    c = fit_constants(raw, {})
    assert c["max_num_seqs"]["source"] == "lower_bound" and c["max_num_seqs"]["value"] == 256
    assert c["kv_cache_tokens"]["source"] == "default" and c["max_model_len"]["source"] == "default"
    assert c["decode_step_ms"]["source"] == "default" and c["decode_step_ms"]["uncertainty"] is None
    raw["saturation"]["cache_config"] = {"num_gpu_blocks": 1000, "block_size": 32}
    c = fit_constants(raw, {})
    assert c["kv_cache_tokens"]["value"] == 32000 and c["block_size"]["value"] == 32


def test_no_prefix_benefit_means_prefix_caching_off() -> None:
    raw = _raw()
    raw["prefix"] = [{"prompt_tokens": 1536, "cold_ms": 338.2, "warm_ms": 337.0}] * 2
    assert fit_constants(raw, {})["enable_prefix_caching"]["value"] is False


def test_chunked_prefill_adds_a_step_per_token_budget() -> None:
    c = fit_constants(_raw(), {})
    assert predict_ttft_ms(c, 16384) - predict_ttft_ms(c, 8192) == pytest.approx(21.0 + 8192 / 5.0)


def test_a_plan_is_capped_to_the_context() -> None:
    plan = ProbePlan().capped(512)
    assert max(plan.lengths) + plan.decode_tokens < 512 and plan.saturation_prompt <= 512


def _ctx_raw(per_ctx_us: float, noise: float = 0.0, seed: int = 5) -> dict:
    """The decode phase (32-token prompts, batches 1..12) and the context phase (batch 2 after long prompts),
    from the simulator's step model with a context term: TPOT = step + per_seq·b + per_ctx·C."""
    rng = random.Random(seed)
    raw = _raw()
    raw["tpot"] = []
    for b, prompt in [(b, 32) for b in (1, 1, 2, 4, 8, 12)] + [(2, 768), (2, 1536)] * 2:
        ctx = b * (prompt + 24.0)
        tpot = 20.0 + 1.0 * b + per_ctx_us * ctx / 1000.0 + rng.gauss(0.0, noise)
        raw["tpot"].append({"concurrency": b, "batch": b, "prompt_tokens": prompt, "context_tokens": ctx,
                            "tpot_ms": tpot})  # fmt: skip
    return raw


def test_the_decode_plane_recovers_a_context_term() -> None:
    raw = _ctx_raw(4.0)
    c = fit_constants(raw, {})
    assert (
        c["decode_per_ctx_token_us"]["value"] == pytest.approx(4.0)
        and c["decode_per_ctx_token_us"]["source"] == "fit"
    )
    assert c["decode_step_ms"]["value"] == pytest.approx(20.0) and c["decode_per_seq_ms"][
        "value"
    ] == pytest.approx(1.0)
    errs = point_errors(raw, c)
    assert all(abs(p["error_ms"]) < 1e-6 for p in errs["tpot"])
    # the line fit alone (no context term) could not explain these points: its error is the gap this closes
    c["decode_per_ctx_token_us"]["value"] = 0.0
    assert max(abs(p["error_ms"]) for p in point_errors(raw, c)["tpot"]) > 5.0


def test_a_noisy_context_term_is_recovered_within_its_uncertainty() -> None:
    for seed in range(5):
        c = fit_constants(_ctx_raw(4.0, noise=1.0, seed=seed), {})
        k = c["decode_per_ctx_token_us"]
        assert abs(k["value"] - 4.0) <= k["uncertainty"] < 4.0, (seed, k)
        for name, true in (("decode_step_ms", 20.0), ("decode_per_seq_ms", 1.0)):
            assert abs(c[name]["value"] - true) <= c[name]["uncertainty"], (seed, name, c[name])


def test_without_two_context_lengths_the_context_term_is_not_fitted() -> None:
    c = fit_constants(_raw(), {})  # old probe points: no context_tokens
    assert (
        c["decode_per_ctx_token_us"]["value"] == 0.0 and c["decode_per_ctx_token_us"]["source"] == "default"
    )
    raw = _ctx_raw(4.0)
    raw["tpot"] = [p for p in raw["tpot"] if p["prompt_tokens"] == 32]  # context grows only with the batch
    c = fit_constants(raw, {})
    assert c["decode_per_ctx_token_us"]["source"] == "default"
    assert c["decode_per_seq_ms"]["value"] == pytest.approx(1.0 + 4.0 * 56 / 1000.0)  # absorbed per sequence
