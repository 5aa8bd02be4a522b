"""Timing fidelity against the simulator's fixed mode (exact TTFT/ITL ground truth)."""

from __future__ import annotations

import os

import pytest

from orchestration.sim.launch import start_simulator
from tests.integration.core.helpers import cli

TTFT_MS, ITL_MS = 50.0, 10.0


@pytest.mark.timeout(240)
def test_medians_within_half_a_millisecond_at_64_streams(tmp_path) -> None:
    cpus = os.cpu_count() or 1
    with start_simulator(["--fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)],
                         cpu=0 if cpus > 1 else None) as sim:  # fmt: skip
        prefix = ["taskset", "-c", "1"] if cpus > 1 else None
        r = cli(["--host", sim.url, "--users", "64", "--spawn-rate", "100", "--num-prompts", "640", "--output-len", "32", "--ignore-eos",
                 "--input-len", "32", "--workers", "1"], str(tmp_path), timeout=200, prefix=prefix)  # fmt: skip
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == 640 and res["failed"] == 0
    assert abs(res["median_ttft_ms"] - TTFT_MS) < 0.5, res["median_ttft_ms"]
    assert abs(res["median_itl_ms"] - ITL_MS) < 0.5, res["median_itl_ms"]
    assert abs(res["median_tpot_ms"] - ITL_MS) < 0.5, res["median_tpot_ms"]
    assert res["total_output_tokens"] == 640 * 32
    for rec in r.records():
        c = rec["chunk_times_us"]
        itls = [c[i] - c[i - 1] for i in range(1, len(c))]
        assert c[-1] - c[0] == sum(itls)  # (e2el - ttft) == sum(itl), exactly
        assert rec["output_tokens"] == 32 and not rec["tokens_estimated"]
    assert "Traceback" not in r.logs()
