"""Open loop, overload, lost workers and interruption, with real master/worker processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.integration.core.helpers import cli, wait_streaming
from vllm_sim.launch import start_simulator


def _served(url: str) -> int:
    """Completion requests the simulator received (the preflight's one included)."""
    stats = json.load(urllib.request.urlopen(url + "/sim/stats", timeout=5))
    return int(stats["generate_requests"])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("burstiness", ["1", "inf"])  # Poisson, and constant intervals (vLLM's limit)
def test_open_loop_rate_split_over_two_workers(tmp_path, burstiness: str) -> None:
    with start_simulator(["--fixed", "--ttft-ms", "20", "--itl-ms", "5"]) as sim:
        r = cli(
            [
                "--host",
                sim.url,
                "--request-rate",
                "40",
                "--num-prompts",
                "200",
                "--workers",
                "2",
                "--output-len",
                "8",
                "--ignore-eos",
                "--seed",
                "5",
                "--burstiness",
                burstiness,
            ],
            str(tmp_path),
        )
        served = _served(sim.url)
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    arr = res["arrivals"]
    assert arr["scheduled"] == 200 and arr["sent"] == 200 and arr["dropped"] == 0
    assert served - r.preflight_requests() == res["completed"] == 200
    workers = {rec["worker"] for rec in r.records()}
    assert len(workers) == 2
    # the schedule is kept: dispatch lag small, achieved arrival rate near the target. What the machine took from
    # the workers' loops (their own loop-lag probe: other tests' processes on a busy box) is not ours to keep:
    # beside the suite's jobs the lag's p99 read 27.8 ms once, over a bound of 25 that a quiet box keeps
    stolen = max(w["loop_lag_p99_ms"] for w in res["client_health"]["workers"].values())
    assert arr["schedule_lag_ms"]["p99"] < 25 + stolen, (arr["schedule_lag_ms"], res["client_health"])
    lags = [(rec["t_start"] - rec["t_intended"]) * 1000 for rec in r.records()]
    assert arr["schedule_lag_ms"]["max"] == pytest.approx(
        max(lags), abs=1e-3
    )  # the worst arrival, not a percentile
    assert "Schedule lag p99 / max (ms):" in r.out
    starts = sorted(rec["t_start"] for rec in r.records())
    achieved = (len(starts) - 1) / (starts[-1] - starts[0])
    intended = sorted(rec["t_intended"] for rec in r.records())
    planned = (len(intended) - 1) / (intended[-1] - intended[0])
    assert achieved == pytest.approx(planned, rel=0.02)
    if burstiness == "inf":  # every gap exactly 1/rate, over both workers together
        gaps = [b - a for a, b in zip(intended, intended[1:], strict=False)]
        assert max(gaps) - min(gaps) < 1e-6 and gaps[0] == pytest.approx(1 / 40, abs=1e-6)
        assert r.result["burstiness"] == "inf"  # like request_rate: JSON has no infinity
    else:
        assert planned == pytest.approx(40, rel=0.25)  # 200 Poisson arrivals


@pytest.mark.timeout(180)
def test_overload_with_max_concurrency_counts_every_arrival(tmp_path) -> None:
    # each request takes ~0.3 s; 4 slots serve ~13 req/s; 40 req/s are offered for 4 s
    with start_simulator(["--fixed", "--ttft-ms", "20", "--itl-ms", "10"]) as sim:
        r = cli(
            [
                "--host",
                sim.url,
                "--request-rate",
                "40",
                "--max-concurrency",
                "4",
                "--run-time",
                "4s",
                "--workers",
                "1",
                "--output-len",
                "30",
                "--ignore-eos",
                "--stop-timeout",
                "5",
                "--percentile-metrics",
                "ttft,e2el",
                "--metric-percentiles",
                "90,99.9",
            ],
            str(tmp_path),
            timeout=150,
        )
        served = _served(sim.url)
    res = r.result
    arr = res["arrivals"]
    assert arr["dropped"] > 0 and arr["late"] > 0
    assert arr["scheduled"] == arr["sent"] + arr["dropped"]
    assert res["max_concurrent_requests"] <= 4
    assert served - r.preflight_requests() == res["completed"] + res["failed"] + res["interrupted"]
    assert r.rc == 4, (r.rc, r.out[-2000:])  # exit code: arrivals dropped
    assert arr["ttft_from_intended_ms"]["p90"] > 500  # queueing shows from the intended start...
    assert res["p90_ttft_ms"] < 100  # ...and not from the actual start
    # vLLM's --percentile-metrics/--metric-percentiles: exactly these fields, in the result and the summary
    assert sorted(k for k in res if k[0] == "p" and k[1].isdigit()) == [
        "p90_e2el_ms",
        "p90_ttft_ms",
        "p99.9_e2el_ms",
        "p99.9_ttft_ms",
    ]
    assert "P99.9 TTFT (ms):" in r.out and "P90 E2EL (ms):" in r.out and "P99 TTFT" not in r.out
    # --run-time's stop is a normal end: no ERROR line in the master's log (the web UI's Logs tab flags those)
    with open(os.path.join(r.run_dir, "master.log"), errors="replace") as fh:
        errors = [line for line in fh if "/ERROR/" in line]
    assert errors == [], errors


@pytest.mark.timeout(200)
def test_worker_sigkilled_is_reported_and_run_completes(tmp_path) -> None:
    with start_simulator(["--fixed", "--ttft-ms", "20", "--itl-ms", "10"]) as sim:
        cmd = [
            sys.executable,
            "-m",
            "orchestration.cli",
            "run",
            "--host",
            sim.url,
            "--users",
            "8",
            "--workers",
            "2",
            "--run-time",
            "12s",
            "--output-len",
            "20",
            "--ignore-eos",
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "kill",
            "--no-report",
            "--stop-timeout",
            "3",
        ]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pids = os.path.join(tmp_path, "kill", "pids.json")
        progress = os.path.join(tmp_path, "kill", "progress.json")
        deadline = time.time() + 60
        while time.time() < deadline:  # kill only once both workers are streaming
            try:
                if json.load(open(progress))["ok"] > 20:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        time.sleep(1)
        victim = json.load(open(pids))["workers"][0]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        out, err = p.communicate(timeout=150)
        served = _served(sim.url)
    assert p.returncode == 6, (p.returncode, out[-3000:], err[-2000:])
    res = json.load(open(os.path.join(tmp_path, "kill", "result.json")))
    lost = res["data_loss"]["workers_lost"]
    assert len(lost) == 1 and lost[0]["lost_at"] - killed_at < 5
    assert "WORKER LOST" in out
    assert res["completed"] > 50
    recorded = res["completed"] + res["failed"] + res["interrupted"]
    assert served - 1 - recorded > 0  # what the killed worker had not reported
    assert lost[0]["possible_loss_window_s"] <= 2.5


@pytest.mark.timeout(200)
def test_sigint_mid_run_writes_results_and_accounts_for_every_request(tmp_path) -> None:
    with start_simulator(["--fixed", "--ttft-ms", "20", "--itl-ms", "20"]) as sim:
        cmd = [
            sys.executable,
            "-m",
            "orchestration.cli",
            "run",
            "--host",
            sim.url,
            "--users",
            "8",
            "--workers",
            "2",
            "--run-time",
            "60s",
            "--output-len",
            "200",
            "--ignore-eos",
            "--output-dir",
            str(tmp_path),
            "--run-name",
            "int",
            "--no-report",
            "--stop-timeout",
            "0.3",
            "--spawn-rate",
            "4",
        ]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_streaming(os.path.join(tmp_path, "int"), ok=8)
        time.sleep(1)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        served = _served(sim.url)
    assert p.returncode == 130, (p.returncode, out[-2000:], err[-2000:])
    res = json.load(open(os.path.join(tmp_path, "int", "result.json")))
    assert res["interrupted"] > 0  # 4 s streams, started 250 ms apart, cut by a 0.3 s stop timeout
    assert res["completed"] + res["failed"] + res["interrupted"] == served - 1
    assert "Traceback" not in out + err


@pytest.mark.timeout(120)
def test_closed_loop_budget_with_fewer_users_than_workers(tmp_path) -> None:
    # tickets come from the master on demand: a worker without users must not hold back a share
    with start_simulator(["--fixed", "--ttft-ms", "5", "--itl-ms", "2"]) as sim:
        r = cli(
            ["--host", sim.url, "--users", "1", "--workers", "2", "--num-prompts", "16", "--output-len", "8"],
            str(tmp_path),
            timeout=100,
        )
        served = _served(sim.url)
    assert r.rc == 0, r.logs()[-2000:]
    assert r.result["completed"] == 16
    assert served - r.preflight_requests() == 16
    assert sorted(rec["seq"] for rec in r.records()) == list(range(1, 17))
