"""Timing fidelity against the simulator's fixed mode (exact TTFT/ITL ground truth)."""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
import urllib.request

import pytest

from tests.integration.core.helpers import CliRun, cli
from vllm_sim import probe
from vllm_sim.launch import start_simulator

TTFT_MS, ITL_MS = 50.0, 10.0
ATTEMPTS = 3  # a 2-core machine shared with other work can delay the simulator itself: retry, never loosen


def _reference(url: str, stop: threading.Event, out: list[float]) -> None:
    """A minimal raw-socket client beside the load: what the simulator really did at this load."""
    body = {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "w " * 32}],
        "max_tokens": 8,
        "stream": True,
        "ignore_eos": True,
    }
    while not stop.is_set():
        res = probe.request(url, "/v1/chat/completions", body)
        firsts = [t for t, ev in res.events if b'"content":"' in ev and b'"role"' not in ev]
        if firsts:
            out.append((firsts[0] - res.start) * 1000)
        time.sleep(0.01)


def _one_run(tmp: str, name: str) -> tuple[CliRun, dict, float]:
    cpus = os.cpu_count() or 1
    with start_simulator(
        ["--fixed", "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)], cpu=0 if cpus > 1 else None
    ) as sim:
        prefix = ["taskset", "-c", "1"] if cpus > 1 else None
        stop, ref = threading.Event(), []  # type: ignore[var-annotated]
        t = threading.Thread(target=_reference, args=(sim.url, stop, ref), daemon=True)
        t.start()
        r = cli(
            [
                "--host",
                sim.url,
                "--users",
                "64",
                "--spawn-rate",
                "100",
                "--num-prompts",
                "640",
                "--output-len",
                "32",
                "--ignore-eos",
                "--input-len",
                "32",
                "--workers",
                "1",
            ],
            tmp,
            timeout=200,
            prefix=prefix,
            name=name,
        )
        stop.set()
        t.join(timeout=10)
        stats = json.load(urllib.request.urlopen(sim.url + "/sim/stats", timeout=5))
    return r, stats, statistics.median(ref) if ref else float("nan")


@pytest.mark.exclusive  # client timing at the floor: alone on the machine
@pytest.mark.timeout(600)
def test_medians_within_half_a_millisecond_at_64_streams(tmp_path) -> None:
    errors = []
    for attempt in range(ATTEMPTS):
        r, stats, ref_ttft = _one_run(str(tmp_path), f"run{attempt}")
        assert r.rc == 0, r.logs()[-3000:]
        res = r.result
        assert res["completed"] == 640 and res["failed"] == 0
        assert res["total_output_tokens"] == 640 * 32
        for rec in r.records():
            c = rec["chunk_times_us"]
            itls = [c[i] - c[i - 1] for i in range(1, len(c))]
            assert c[-1] - c[0] == sum(itls)  # (e2el - ttft) == sum(itl), exactly
            assert rec["output_tokens"] == 32 and not rec["tokens_estimated"]
        assert "Traceback" not in r.logs()
        err = {
            m: res[f"median_{m}_ms"] - truth
            for m, truth in (("ttft", TTFT_MS), ("itl", ITL_MS), ("tpot", ITL_MS))
        }
        # the truth is what the simulator did: nominal, or what a raw-socket client saw beside the load
        err["ttft_vs_reference"] = res["median_ttft_ms"] - ref_ttft
        errors.append((err, stats["lateness_s"]))
        ttft_ok = abs(err["ttft"]) < 0.5 or abs(err["ttft_vs_reference"]) < 0.5
        print("fidelity attempt", attempt, err)
        if ttft_ok and abs(err["itl"]) < 0.5 and abs(err["tpot"]) < 0.5:
            return
    pytest.fail(f"median errors (ms) and simulator lateness over {ATTEMPTS} attempts: {errors}")
