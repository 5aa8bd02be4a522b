"""The fit of the simulator's constants: lines, uncertainties, corrections, limits and per-point errors."""

from __future__ import annotations

import copy
import random

import pytest

from orchestration.twin.fit import RESOLUTION_MS, UNSEEN_RATE, fit_constants, linfit
from orchestration.twin.ownpath import tpot_excess
from orchestration.twin.phases import ProbePlan
from orchestration.twin.predict import point_errors, predict_ttft_ms


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
    sat = {
        "requests": 64,
        "max_running": 12,
        "max_running_while_waiting": 12,
        "kv_samples": [
            {"usage": 0.25, "held_tokens": 5000, "running": 12},
            {"usage": 0.5, "held_tokens": 10000, "running": 12},
        ],
    }
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
    assert c["max_num_seqs"] == {
        "value": 12,
        "uncertainty": 0.0,
        "unit": "sequences",
        "source": "measured",
        "note": "most requests running while others waited (/metrics)",
    }
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
    raw["path_latency"] = {
        "ttft": {"excess_ms": 3.0, "spread_ms": 0.5, "n": 12, "per_token_ms": 0.001, "at_tokens": 32},
        "tpot": [{"batch": 1, "excess_ms": 1.0}, {"batch": 16, "excess_ms": 2.0}],
    }
    c = fit_constants(raw, {})
    assert c["decode_step_ms"]["value"] == pytest.approx(20.0)
    assert c["decode_per_seq_ms"]["value"] == pytest.approx(1.0)
    assert c["request_overhead_ms"]["value"] == pytest.approx(10.0)
    assert c["prefill_tokens_per_s"]["value"] == pytest.approx(5000.0)
    assert c["decode_step_ms"]["uncertainty"] >= 1.0 and c["request_overhead_ms"]["uncertainty"] >= 3.0
    assert tpot_excess(raw["path_latency"], 8.5) == pytest.approx(1.5) and tpot_excess(None, 4) == 0.0
    # the fit table judges the twin as it serves: the model plus its own path, against the server's points
    errs = point_errors(raw, c)
    assert all(abs(p["error_ms"]) < 1e-6 for p in errs["ttft"] + errs["tpot"])


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
        raw["tpot"].append(
            {"concurrency": b, "batch": b, "prompt_tokens": prompt, "context_tokens": ctx, "tpot_ms": tpot}
        )
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


def _phased_raw(per_ctx_us: float, shift_ms: float = 0.0, noise: float = 0.0, seed: int = 3) -> dict:
    """The decode phase (32-token prompts, batches 1..16) and the context phase as the probe now sends it (one
    stream after 32-, 768- and 1536-token prompts in turn, twice), from TPOT = 2 + 0.014·b + per_ctx·C; the
    machine `shift_ms` slower per step during the context phase (the dev box's served simulator sharing its
    cores: its load came and went between phases)."""
    rng = random.Random(seed)
    raw = _raw()
    raw["tpot"] = []
    for b, prompt, phase in [(b, 32, None) for b in (1, 1, 1, 2, 2, 4, 4, 8, 8, 16, 16)] + [
        (1, n, "context") for n in (32, 768, 1536) * 2
    ]:
        ctx = b * (prompt + 24.0)
        tpot = 2.0 + 0.014 * b + per_ctx_us * ctx / 1000.0 + rng.gauss(0.0, noise)
        point = {"concurrency": b, "batch": b, "prompt_tokens": prompt, "context_tokens": ctx}
        point["tpot_ms"] = tpot + (shift_ms if phase else 0.0)
        if phase:
            point["phase"] = phase
        raw["tpot"].append(point)
    return raw


def test_the_context_term_comes_from_the_context_phase_alone() -> None:
    # no context term, the context phase 0.3 ms slower per step throughout: the plane over every point reads the
    # shift as a context term; the context phase's own points, measured in turn, do not
    shifted = _phased_raw(0.0, shift_ms=0.3)
    k = fit_constants(shifted, {})["decode_per_ctx_token_us"]
    assert k["value"] == pytest.approx(0.0, abs=1e-9) and k["source"] == "fit"
    untagged = copy.deepcopy(shifted)
    for p in untagged["tpot"]:
        p.pop("phase", None)
    assert fit_constants(untagged, {})["decode_per_ctx_token_us"]["value"] > 0.15  # the old fit's false term
    # a real term is recovered, with the decode line under it
    c = fit_constants(_phased_raw(4.0, shift_ms=0.0), {})
    assert c["decode_per_ctx_token_us"]["value"] == pytest.approx(4.0)
    assert c["decode_step_ms"]["value"] == pytest.approx(2.0) and c["decode_per_seq_ms"][
        "value"
    ] == pytest.approx(0.014)
    for seed in range(5):  # and within its uncertainty where the points are noisy
        k = fit_constants(_phased_raw(0.5, noise=0.1, seed=seed), {})["decode_per_ctx_token_us"]
        assert abs(k["value"] - 0.5) <= k["uncertainty"], (seed, k)


def _bent_raw(
    q_ns: float,
    noise: float = 0.0,
    seed: int = 7,
    lengths: tuple[int, ...] = (32, 256, 768, 1536),
    rounds: int = 3,
) -> dict:
    """The TTFT phase (concurrency 1, `rounds` of each length) from the simulator's step model with a prefill cost
    per token pair: TTFT = overhead + step + per_seq + P / rate + q·P(P-1)/2 (true: 10, 20, 1 ms, 5000 tok/s)."""
    rng = random.Random(seed)
    raw = _raw()
    raw["ttft"] = [
        {"prompt_tokens": n, "ttft_ms": 31.0 + n / 5.0 + q_ns * n * (n - 1) / 2e6 + rng.gauss(0.0, noise)}
        for _ in range(rounds)
        for n in lengths
    ]
    return raw


def test_ttft_that_bends_up_is_fitted_with_a_prefill_cost_per_token_pair() -> None:
    raw = _bent_raw(30.0)
    c = fit_constants(raw, {})
    q = c["prefill_per_ctx_token_ns"]
    assert q["value"] == pytest.approx(30.0) and q["source"] == "fit" and q["unit"] == "ns/token²"
    assert c["prefill_tokens_per_s"]["value"] == pytest.approx(5000.0)
    assert c["request_overhead_ms"]["value"] == pytest.approx(10.0)
    errs = point_errors(raw, c)
    assert all(abs(p["error_ms"]) < 1e-6 for p in errs["ttft"])  # the prediction carries the term
    # a straight line could not: 30 ns per pair is 35 ms at 1536 tokens, and the line misses the short prompts
    c["prefill_per_ctx_token_ns"]["value"] = 0.0
    assert max(abs(p["error_ms"]) for p in point_errors(raw, c)["ttft"]) > 5.0
    # chunked: the chunks' pairs sum to the whole prompt's, so the term is q·P(P-1)/2 above the token budget too
    c["prefill_per_ctx_token_ns"]["value"] = 30.0
    with_term = predict_ttft_ms(c, 16384) - predict_ttft_ms(c, 8192)
    assert with_term == pytest.approx(21.0 + 8192 / 5.0 + 30.0 * (16384 * 16383 - 8192 * 8191) / 2e6)


def test_a_noisy_prefill_curvature_is_recovered_within_its_uncertainty() -> None:
    for seed in range(6):
        c = fit_constants(_bent_raw(30.0, noise=1.0, seed=seed), {})
        q = c["prefill_per_ctx_token_ns"]
        assert q["source"] == "fit" and abs(q["value"] - 30.0) <= q["uncertainty"] < 30.0, (seed, q)
        for name, true in (("prefill_tokens_per_s", 5000.0), ("request_overhead_ms", 10.0)):
            assert abs(c[name]["value"] - true) <= c[name]["uncertainty"], (seed, name, c[name])


def test_a_straight_ttft_line_keeps_no_curvature() -> None:
    """Points on a line (with noise): q is not distinguishable from 0, so the fit is the line, as before the term."""
    for seed in range(6):
        raw = _bent_raw(0.0, noise=1.0, seed=seed)
        c = fit_constants(raw, {})
        q = c["prefill_per_ctx_token_ns"]
        assert q["value"] == 0.0 and q["source"] == "default", (seed, q)
        assert q["note"].startswith("not distinguishable from 0: ") and "±" in q["note"]
        line = linfit([float(p["prompt_tokens"]) for p in raw["ttft"]], [p["ttft_ms"] for p in raw["ttft"]])
        assert c["prefill_tokens_per_s"]["value"] == pytest.approx(1000.0 / line.b)
        assert c["request_overhead_ms"]["value"] == pytest.approx(line.a - 21.0)


def test_two_prompt_lengths_are_too_few_for_a_curvature() -> None:
    c = fit_constants(_bent_raw(30.0, lengths=(32, 1536)), {})
    q = c["prefill_per_ctx_token_ns"]
    assert q["value"] == 0.0 and q["source"] == "default" and "fewer than 3 prompt lengths" in q["note"]
    # the chord through the two lengths, as before the term
    assert c["prefill_tokens_per_s"]["value"] == pytest.approx(1000.0 / (0.2 + 30.0 * 1567 / 2e6))
    old = fit_constants(_raw(), {})  # the points of a probe on a server whose TTFT is a line
    assert old["prefill_per_ctx_token_ns"]["source"] == "default"


def test_a_curvature_with_no_cost_per_token_beside_it() -> None:
    """vLLM for CPU's TTFT is nearly flat and then bends: a fit whose cost per token comes out below 0 beside the
    curvature keeps the curvature with no cost per token (a line in the token pairs), not the default speed."""
    raw = _bent_raw(50.0)
    for p in raw["ttft"]:
        p["ttft_ms"] -= p["prompt_tokens"] * (0.2 + 0.002)  # 2 µs per token below nothing
    c = fit_constants(raw, {})
    q = c["prefill_per_ctx_token_ns"]
    assert q["source"] == "fit" and 40.0 < q["value"] < 50.0 and "not above 0" in q["note"]
    assert c["prefill_tokens_per_s"]["value"] == UNSEEN_RATE and c["prefill_tokens_per_s"]["source"] == "fit"
    assert max(abs(p["error_pct"]) for p in point_errors(raw, c)["ttft"]) < 10.0


def _held_raw(excess: float) -> dict:
    """TPOT points on an engine of 2 ms + 0.014 ms per sequence behind one API process writing a chunk per 40 µs
    (at 128 and 256 streams the clients wait for it), and the twin's own TPOT excess `excess` at every batch (the
    local simulator's lateness, which the twin adds back when it serves: not in the server's points)."""
    raw = _raw()
    raw["path_latency"] = {"tpot": [{"batch": 1, "excess_ms": excess, "bursts": 3}]}
    raw["tpot"] = []
    for b in (1, 1, 2, 4, 8, 16, 32, 64, 128, 256):
        engine = 2.0 + 0.014 * b
        client = max(engine, 0.04 * b)
        raw["tpot"].append(
            {
                "concurrency": b,
                "batch": b,
                "prompt_tokens": 32,
                "output_tokens": 48,
                "context_tokens": b * 56.0,
                "tpot_ms": client,
                "engine_tpot_ms": engine,
                "api_tpot_ms": client - engine,
            }
        )
    return raw


@pytest.mark.parametrize("excess", [0.0, 0.7])
def test_points_the_api_server_held_back_fit_the_engine_by_its_own_tpot(excess: float) -> None:
    """The held-back points count at the engine's own TPOT, less the twin's excess like every other point: the
    engine's constants are the engine's (the clients' TPOT alone says ~0.04 ms per sequence)."""
    c = fit_constants(_held_raw(excess), {})
    assert c["decode_step_ms"]["value"] == pytest.approx(
        2.0 - excess, abs=0.01
    )  # the twin adds its excess back
    assert c["decode_per_seq_ms"]["value"] == pytest.approx(0.014, abs=0.001)
    assert c["decode_per_ctx_token_us"]["value"] == 0.0
