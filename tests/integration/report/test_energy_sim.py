"""`vllm-locust run --gpu-metrics URL` against the simulator and a DCGM exporter whose energy counter advances at a
known power on the wall clock: result.json's `energy` holds that power times the measured window (exact joules per
scrape are tests/unit/server/test_gpu_scrape.py's), the
joules per output token divide it by the run's tokens, and the summary prints them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fake_dcgm import serve_page
from tests.integration.scenarios.runner import succeeded, vllm_locust
from vllm_users.measure import metric_keys as K

WATTS = (250.0, 125.0)  # GPU 0 and GPU 1, constant: each counter is E0 + P x t
FAST_SIM = ["--sim-args", "--fixed --ttft-ms 5 --itl-ms 1", "--output-len", "8"]


def _page() -> str:
    t = time.time()
    lines = ["# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter", "# TYPE DCGM_FI_DEV_POWER_USAGE gauge"]
    for gpu, watts in enumerate(WATTS):
        labels = f'gpu="{gpu}",UUID="GPU-{gpu}",Hostname="node-a"'
        # mJ; a large start, as after days of uptime
        lines.append(f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} {7e9 + watts * 1000 * t:.6f}")
        lines.append(f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} {watts}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def exporter() -> Iterator[str]:
    url, stop = serve_page(_page)
    try:
        yield url
    finally:
        stop()


def test_run_with_gpu_metrics_writes_exact_joules(tmp_path: Any, exporter: str) -> None:
    r = vllm_locust(
        tmp_path, "--num-prompts", "30", "--gpu-metrics", exporter, "--energy-price", "0.25", *FAST_SIM
    )
    assert succeeded(r), r.err
    e = r.result["energy"]
    assert e["available"] and e["gpus"] == 2 and e["source"] == "counter"
    span = e["window"]["duration_s"]
    assert span == pytest.approx(r.result[K.DURATION], rel=1e-6)  # the measured requests' span
    # the counter is linear in time: the energy is the power times the window, but for the time between the
    # sampler's clock reading and the exporter's (one scrape's latency, here well under 50 ms at each end)
    slack = sum(WATTS) * 0.05 * 2
    assert e[K.ENERGY_J] == pytest.approx(sum(WATTS) * span, abs=slack)
    assert e[K.MEAN_POWER_W] == pytest.approx(sum(WATTS), abs=slack / span)
    tokens = r.result[K.TOTAL_OUTPUT_TOKENS]
    assert e[K.ENERGY_PER_OUTPUT_TOKEN_J] == pytest.approx(e[K.ENERGY_J] / tokens, rel=1e-12)
    assert e[K.ENERGY_COST_USD] == pytest.approx(e[K.ENERGY_J] / 3.6e6 * 0.25, rel=1e-12)
    assert e["per_gpu"]["node-a:1"][K.ENERGY_J] == pytest.approx(WATTS[1] * span, abs=WATTS[1] * 0.1)
    assert e["per_gpu"]["node-a:0"][K.ENERGY_J] == pytest.approx(
        2 * e["per_gpu"]["node-a:1"][K.ENERGY_J], rel=1e-6
    )
    assert "Energy per output token (J)" in r.out


def test_unreachable_exporter_is_named_and_the_run_goes_on(tmp_path: Any) -> None:
    from orchestration.launch.ports import free_port

    url = f"http://127.0.0.1:{free_port()}/metrics"
    r = vllm_locust(tmp_path, "--num-prompts", "5", "--gpu-metrics", url, *FAST_SIM)
    assert succeeded(r), r.err
    said = [ln for ln in (r.out + r.err).splitlines() if url in ln and "cannot be reached" in ln]
    assert said, r.out[-2000:]
    assert r.result["energy"]["available"] is False
    assert "GPU figures unavailable" in r.out
