"""The replay of a TPOT point behind the API-server stage, on cases whose answer is known: no stage cost (the
engine's step), one stream behind a slow process (its chunk cost), a long burst (the steady state), and the
simulator's own readings from a dev-box calibration (2 ms + 0.014 ms per sequence, one process at 1,500 µs per
request and 100 µs per chunk), where the steady state said 6.4 and 15.7 ms."""

from __future__ import annotations

import dataclasses

import pytest

from orchestration.twin.api_replay import replay_api_tpot_ms
from vllm_sim.config import SimConfig

CFG = dataclasses.replace(
    SimConfig(), decode_step_ms=2.0, decode_per_seq_ms=0.014, prefill_tokens_per_s=190000
)


def test_without_a_stage_cost_the_engine_step() -> None:
    for b in (1, 8, 64):
        got = replay_api_tpot_ms(CFG, b, 32, 48, processes=1, request_us=0.0, chunk_us=0.0)
        assert got == pytest.approx(2.0 + 0.014 * b, rel=1e-6), b


def test_one_stream_behind_a_slow_process_reads_its_chunk_cost() -> None:
    got = replay_api_tpot_ms(CFG, 1, 32, 48, processes=1, request_us=100.0, chunk_us=5000.0)
    assert got == pytest.approx(5.0, rel=1e-6)


def test_a_long_burst_reaches_the_steady_state() -> None:
    # 64 streams x 100 µs = 6.4 ms of the process per token, against the engine's 2.9-ms step
    got = replay_api_tpot_ms(CFG, 64, 32, 2000, processes=1, request_us=10.0, chunk_us=100.0)
    assert got == pytest.approx(6.4, rel=0.02)
    two = replay_api_tpot_ms(CFG, 64, 32, 2000, processes=2, request_us=10.0, chunk_us=100.0)
    assert two == pytest.approx(3.2, rel=0.02)  # the streams split over two processes


@pytest.mark.parametrize(
    ("streams", "batch", "measured_ms"), [(32, 32, 2.80), (64, 64, 4.94), (256, 116, 9.87), (256, 127, 10.46)]
)
def test_the_simulators_own_bursts(streams: int, batch: int, measured_ms: float) -> None:
    got = replay_api_tpot_ms(
        CFG, streams, 32, 48, processes=1, request_us=1500.0, chunk_us=100.0, seats=256, batch=batch
    )
    assert got == pytest.approx(measured_ms, rel=0.1)


def test_nothing_to_replay() -> None:
    assert replay_api_tpot_ms(CFG, 4, 32, 1, processes=1, request_us=1.0, chunk_us=1.0) is None
    assert replay_api_tpot_ms(CFG, 0, 32, 48, processes=1, request_us=1.0, chunk_us=1.0) is None
