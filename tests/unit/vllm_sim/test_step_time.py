"""The batching engine's step time: fixed, per sequence, per context token of the decoding sequences (issue 25),
per prefilled token."""

from __future__ import annotations

import json

import pytest

from vllm_sim import probe
from vllm_sim.config import SimConfig
from vllm_sim.engine import step_seconds
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
    body = {"model": "sim-model", "prompt": " ".join(["w"] * prompt_words), "max_tokens": 9, "ignore_eos": True,
            "stream": True}  # fmt: skip
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
