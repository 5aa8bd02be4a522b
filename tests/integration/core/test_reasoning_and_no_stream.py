"""Reasoning models (TTFT and TTFA) and non-streamed requests against the simulator's fixed mode."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.integration.core.helpers import cli
from vllm_sim.launch import start_simulator

TTFT_MS, ITL_MS, N_REASON, OUT = 50.0, 10.0, 8, 16
FIXED = ["--fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]
LOAD = [
    "--users",
    "8",
    "--spawn-rate",
    "100",
    "--num-prompts",
    "80",
    "--output-len",
    str(OUT),
    "--ignore-eos",
    "--input-len",
    "16",
    "--workers",
    "1",
]


def _prefix() -> list[str] | None:
    return ["taskset", "-c", "1"] if (os.cpu_count() or 1) > 1 else None


@pytest.mark.exclusive  # client timing at the floor: alone on the machine
@pytest.mark.timeout(300)
def test_reasoning_run_has_ttfa_ttft_plus_n_itl(tmp_path) -> None:
    with start_simulator([*FIXED, "--reasoning-tokens", str(N_REASON)]) as sim:
        r = cli(["--host", sim.url, *LOAD], str(tmp_path), timeout=200, prefix=_prefix())
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == 80 and res["failed"] == 0
    assert res["total_reasoning_tokens"] == 80 * N_REASON and res["total_answer_tokens"] == 80 * (
        OUT - N_REASON
    )
    assert res["reasoning_tokens_estimated_requests"] == 0  # the simulator's usage says how many
    truth = TTFT_MS + N_REASON * ITL_MS
    ttfa = np.array([rec["answer_us"] / 1e3 for rec in r.records()])
    ttft = np.array([rec["chunk_times_us"][0] / 1e3 for rec in r.records()])
    assert ttfa.min() >= truth - 0.5  # never early (fixed mode keeps its schedule from the arrival)
    assert (ttfa > ttft).all()
    assert (
        np.percentile(ttfa, 25) < truth + 3.0
    )  # a busy 2-core box is late at times, the lower quartile is not
    assert res["median_ttfa_ms"] >= truth - 0.5 and "p99_ttfa_ms" in res
    assert res["mean_ttft_ms"] < res["mean_ttfa_ms"] - N_REASON * ITL_MS + 5  # TTFT: the first thinking token
    assert (
        abs(res["median_answer_tpot_ms"] - ITL_MS) < 2.0
        and abs(res["median_reasoning_tpot_ms"] - ITL_MS) < 2.0
    )
    assert "Time to First Answer Token" in r.out and "Reasoning tokens:" in r.out


@pytest.mark.exclusive  # client timing at the floor: alone on the machine
@pytest.mark.timeout(300)
def test_no_stream_run_has_e2el_and_no_ttft(tmp_path) -> None:
    with start_simulator(FIXED) as sim:
        r = cli(
            ["--host", sim.url, *LOAD, "--no-stream", "--scenario", "chat:1,json:1"],
            str(tmp_path),
            timeout=200,
            prefix=_prefix(),
        )
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert res["completed"] == 80 and res["failed"] == 0 and res["not_streamed_requests"] == 80
    assert not [k for k in res if "_ttft_" in k or "_itl_" in k or "_tpot_" in k or "ttfa" in k]
    for scen in res["per_scenario"].values():
        assert "mean_ttft_ms" not in scen
    truth = TTFT_MS + (OUT - 1) * ITL_MS
    e2el = np.array([rec["chunk_times_us"][-1] / 1e3 for rec in r.records() if rec["scenario"] == "chat"])
    assert e2el.min() >= truth - 0.5 and np.percentile(e2el, 25) < truth + 3.0
    assert res["validity_rate"] == 1.0  # json: the non-streamed text reached check()
    assert all(rec["not_streamed"] for rec in r.records()) and "not streamed: no TTFT/ITL" in r.out
