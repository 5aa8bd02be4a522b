"""A worker whose host clock is 2.5 s ahead of the master's: it measures the offset, starts the open-loop
schedule at the master's t0 and puts its records on the master's time axis.

Real processes on loopback: the simulator, a master (`run --workers 0 --expect-workers 2`) and two `vllm-locust
worker` processes, one of them with its wall clock shifted by a test-only sitecustomize (skewed_clock/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from orchestration.launch.ports import free_port
from vllm_sim.launch import start_simulator

SKEW_S = 2.5
SKEW_DIR = Path(__file__).parent / "skewed_clock"


def _worker(port: int, skew_s: float) -> subprocess.Popen[str]:
    env = dict(os.environ)
    if skew_s:
        env["VLLM_LOCUST_TEST_CLOCK_SKEW_S"] = str(skew_s)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SKEW_DIR), env.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestration.cli",
            "worker",
            "--master-host",
            "127.0.0.1",
            "--master-port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def _p99_ms(lags_s: list[float]) -> float:
    return float(np.percentile(np.array(lags_s) * 1000, 99))


def _p50_ms(lags_s: list[float]) -> float:
    return float(np.percentile(np.array(lags_s) * 1000, 50))


@pytest.mark.timeout(200)
def test_a_skewed_worker_keeps_the_masters_schedule_and_time_axis(tmp_path: Path) -> None:
    port = free_port()
    with start_simulator(["--fixed", "--ttft-ms", "20", "--itl-ms", "5"]) as sim:
        master = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestration.cli",
                "run",
                "--host",
                sim.url,
                "--workers",
                "0",
                "--expect-workers",
                "2",
                "--master-bind-host",
                "127.0.0.1",
                "--master-port",
                str(port),
                "--request-rate",
                "40",
                "--burstiness",
                "inf",
                "--num-prompts",
                "160",
                "--output-len",
                "8",
                "--ignore-eos",
                "--output-dir",
                str(tmp_path),
                "--run-name",
                "skew",
                "--no-report",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        workers = [_worker(port, 0.0), _worker(port, SKEW_S)]
        try:
            out, err = master.communicate(timeout=150)
            wout = [w.communicate(timeout=60)[0] for w in workers]
        finally:
            for p in (master, *workers):
                if p.poll() is None:
                    p.kill()
    assert master.returncode == 0, (out[-2000:], err[-3000:], wout)
    run = tmp_path / "skew"
    res = json.loads((run / "result.json").read_text())
    recs = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines() if x.strip()]

    # each worker's offset to the master: one at -2.5 s (its clock ahead), the other at 0, within the bound the
    # round trip proves (half of it)
    clocks = res["meta"]["clock_offsets"]
    assert len(clocks) == 2, clocks
    skewed = min(clocks, key=lambda w: clocks[w]["offset_ms"])
    plain = next(w for w in clocks if w != skewed)
    for w, want in ((skewed, -SKEW_S * 1000), (plain, 0.0)):
        c = clocks[w]
        assert abs(c["offset_ms"] - want) <= c["uncertainty_ms"] + 0.5, (w, c)
        assert c["probes"] >= 1 and abs(c["drift_ms"]) <= 2 * c["uncertainty_ms"] + 1.0, (w, c)
    said = [x for x in (run / "master.log").read_text().splitlines() if "off the master's" in x]
    ahead = f"worker {skewed}'s clock is {-clocks[skewed]['offset_ms']:+.1f} ms"
    assert len(said) == 1 and ahead in said[0], said  # once, for the skewed one

    # the schedule is kept on both workers: lag from the master's intended times, on one axis
    assert {r["worker"] for r in recs} == {skewed, plain} and len(recs) == 160
    lag = {w: [r["t_start"] - r["t_intended"] for r in recs if r["worker"] == w] for w in clocks}
    # against what the unskewed worker itself keeps: on a busy 2-core box both lose the same to other processes,
    # and the unskewed worker's own lag is that loss (an absolute bound would assert the machine). The median
    # within 2 ms; the p99 of 80 sends is one or two of them, so a stall of another process moves it by 10 ms
    # and more (seen: 15.1 against 8.2 ms): within 50 ms, where a clock the master did not correct reads 2.2 s
    lags = {w: (_p50_ms(v), _p99_ms(v)) for w, v in lag.items()}
    assert lags[skewed][0] <= lags[plain][0] + 2.0 and lags[skewed][1] <= lags[plain][1] + 50.0, lags
    assert min(min(v) for v in lag.values()) > -0.001  # nothing sent before its time
    arr = res["arrivals"]
    assert arr["sent"] == 160 and arr["dropped"] == 0
    # result.json's lag is these records' (the worst one exactly), and keeps the same bound over both workers
    assert arr["schedule_lag_ms"]["max"] == pytest.approx(max(max(v) for v in lag.values()) * 1000, abs=1e-3)
    assert arr["schedule_lag_ms"]["p99"] <= _p99_ms(lag[plain]) + 5.0, arr["schedule_lag_ms"]
    print({w: round(_p99_ms(v), 3) for w, v in lag.items()}, arr["schedule_lag_ms"], clocks)

    # records on the master's axis: the intended times are the master's t0 plus the global schedule's offsets
    # (every 25 ms, the two workers interleaved), and each send follows its intended time
    t0 = next(m["t0"] for m in res["timeline"] if m["kind"] == "schedule")
    intended = sorted(r["t_intended"] for r in recs)
    assert 0 <= intended[0] - t0 <= 1 / 40 + 1e-5  # the first arrival is due one interval after t0
    gaps = np.diff(intended)
    assert float(gaps.max() - gaps.min()) < 1e-6 and float(gaps[0]) == pytest.approx(1 / 40, abs=1e-6)
    by_intended = sorted(recs, key=lambda r: r["t_intended"])
    assert {by_intended[0]["worker"], by_intended[1]["worker"]} == {skewed, plain}
    sampled = [
        json.loads(x)["t"] for x in (run / "server_metrics.jsonl").read_text().splitlines() if x.strip()
    ]
    starts = [r["t_start"] for r in recs]
    assert min(sampled) < min(starts) and max(starts) < max(sampled)  # inside the master's own samples
