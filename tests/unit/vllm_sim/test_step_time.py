"""The batching engine's step time: fixed, per sequence, per context token of the decoding sequences,
per prefilled token, and per prefill token pair (each prefilled token per token before it), the terms the twin fits."""

from __future__ import annotations

import json

import pytest

from vllm_sim import probe
from vllm_sim.config import SimConfig, parse_config
from vllm_sim.engine import prefill_pairs, step_seconds
from vllm_sim.launch import start_simulator


def test_step_time_adds_a_cost_per_context_token() -> None:
    cfg = SimConfig(
        decode_step_ms=2.0, decode_per_seq_ms=0.5, decode_per_ctx_token_us=3.0, prefill_tokens_per_s=1e4
    )
    # 4 sequences holding 2000 tokens in all, 100 tokens of prefill: 2 + 2 + 6 ms + 10 ms
    assert step_seconds(cfg, 4, 2000, 100) == pytest.approx(0.020)
    assert step_seconds(SimConfig(), 4, 2000, 0) == pytest.approx(
        step_seconds(SimConfig(), 4, 0, 0)
    )  # default 0


def _tpot_ms(url: str, prompt_words: int) -> float:
    body = {
        "model": "sim-model",
        "prompt": " ".join(["w"] * prompt_words),
        "max_tokens": 9,
        "ignore_eos": True,
        "stream": True,
    }
    r = probe.request(url, "/v1/completions", body)
    assert r.status == 200, r.body
    payloads = [(t, ev.removeprefix(b"data: ")) for t, ev in r.events]
    times = [
        t for t, ev in payloads if ev != b"[DONE]" and any(c.get("text") for c in json.loads(ev)["choices"])
    ]
    assert len(times) == 9
    return 1000.0 * (times[-1] - times[0]) / (len(times) - 1)


def test_a_long_context_slows_decoding_by_the_term() -> None:
    # 2 ms a step + 10 µs per context token: after a 2000-token prompt each step takes 22 ms (>= 21: a lower bound,
    # never flaky on a busy machine); the same prompt without the term stays far below it
    args = ["--decode-step-ms", "2", "--decode-per-seq-ms", "0", "--prefill-tokens-per-s", "1e9"]
    with start_simulator([*args, "--decode-per-ctx-token-us", "10"]) as sim:
        assert min(_tpot_ms(sim.url, 2000) for _ in range(2)) >= 21.0
    with start_simulator(args) as sim:
        assert min(_tpot_ms(sim.url, 2000) for _ in range(3)) < 15.0


def test_a_chunked_prefill_costs_what_the_whole_prompt_costs_with_the_pair_term() -> None:
    cfg = SimConfig(
        decode_step_ms=2.0, decode_per_seq_ms=0.5, prefill_tokens_per_s=1e4, prefill_per_ctx_token_ns=40.0
    )
    # 1000 tokens in one step: 2.5 ms + 100 ms + 40 ns x 1000·999/2 pairs (19.98 ms)
    assert prefill_pairs(0, 1000) == 499_500
    whole = step_seconds(cfg, 1, 0, 1000, prefill_pairs(0, 1000))
    assert whole == pytest.approx(0.0025 + 0.1 + 0.01998)
    # the same prompt in two chunks (600 from position 0, then 400 from 600, over the 600 before them too): the
    # same prefill cost in total, and one more fixed step cost
    assert prefill_pairs(0, 600) + prefill_pairs(600, 400) == prefill_pairs(0, 1000)
    first, second = prefill_pairs(0, 600), prefill_pairs(600, 400)
    chunked = step_seconds(cfg, 1, 0, 600, first) + step_seconds(cfg, 1, 0, 400, second)
    assert chunked == pytest.approx(whole + 0.0025)
    # a chunk after a cached prefix attends over it: 100 tokens after 900 cached cost 40 ns x (100·900 + 4950)
    after_cached = step_seconds(cfg, 1, 0, 100, prefill_pairs(900, 100))
    assert after_cached == pytest.approx(0.0025 + 0.01 + 40e-9 * 94_950)
    assert step_seconds(SimConfig(), 1, 0, 100, 10**6) == step_seconds(SimConfig(), 1, 0, 100)  # default 0
    with pytest.raises(SystemExit):
        parse_config(["--prefill-per-ctx-token-ns", "-1"])


def _ttft_s(url: str, prompt: str) -> float:
    r = probe.request(
        url, "/v1/completions", {"model": "sim-model", "prompt": prompt, "max_tokens": 1, "stream": True}
    )
    assert r.status == 200, r.body
    return r.events[0][0] - r.start


def test_a_long_prompt_pays_the_pair_term_over_its_cached_prefix_too() -> None:
    # 1 ms a step, prefill speed out of the way, 100 ns per pair, chunks of 512 tokens: a 2000-token prompt costs
    # 100 ns x 1,999,000 pairs = 200 ms whatever its chunks (lower bounds: never flaky on a busy machine)
    args = [
        "--decode-step-ms",
        "1",
        "--decode-per-seq-ms",
        "0",
        "--prefill-tokens-per-s",
        "1e9",
        "--max-num-batched-tokens",
        "512",
    ]
    first = " ".join(f"a{i}" for i in range(1000))
    second = " ".join(f"b{i}" for i in range(1000))
    with start_simulator([*args, "--prefill-per-ctx-token-ns", "100"]) as sim:
        assert _ttft_s(sim.url, " ".join(f"c{i}" for i in range(2000))) >= 0.199
        _ttft_s(sim.url, first)  # caches the first 992 tokens (62 blocks of 16)
        # the other 1008 tokens attend over those 992 too: 100 ns x (1008·992 + 1008·1007/2) = 150.7 ms, where
        # counting only their own pairs would say 50.8 ms
        assert _ttft_s(sim.url, first + " " + second) >= 0.150
    with start_simulator(args) as sim:
        assert min(_ttft_s(sim.url, " ".join(f"c{i}" for i in range(2000))) for _ in range(3)) < 0.1
