"""Killed processes: workers, all workers, the master; torn files. Nothing measured is silently lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from vllm_sim.launch import start_simulator
from vllm_users.measure.result_builder import write_result

pytestmark = pytest.mark.timeout(200)


def _start_run(sim_url: str, tmp: str, name: str, extra: list[str] | None = None) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--host",
        sim_url,
        "--users",
        "6",
        "--workers",
        "2",
        "--run-time",
        "40s",
        "--output-len",
        "20",
        "--ignore-eos",
        "--output-dir",
        tmp,
        "--run-name",
        name,
        "--no-report",
        "--stop-timeout",
        "2",
        *(extra or []),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_streaming(run_dir: str, timeout: float = 60) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(os.path.join(run_dir, "progress.json")) as fh:
                p = json.load(fh)
            if p["ok"] > 20 and p["workers_live"] == 2:
                with open(os.path.join(run_dir, "pids.json")) as fh:
                    return json.load(fh)
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise AssertionError("run did not start streaming")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_all_workers_killed_master_writes_results_and_exits_aborted(tmp_path) -> None:
    with start_simulator(["--fixed", "--ttft-ms", "10", "--itl-ms", "10"]) as sim:
        p = _start_run(sim.url, str(tmp_path), "allw")
        run_dir = os.path.join(tmp_path, "allw")
        pids = _wait_streaming(run_dir)
        for w in pids["workers"]:
            os.kill(w, signal.SIGKILL)
        t_kill = time.time()
        out, err = p.communicate(timeout=120)
    assert time.time() - t_kill < 60  # the master did not wait for the 40 s run time
    assert p.returncode == 7, (p.returncode, out[-2000:], err[-2000:])
    res = json.load(open(os.path.join(run_dir, "result.json")))
    assert res["completed"] > 0 and len(res["data_loss"]["workers_lost"]) == 2
    assert os.path.exists(os.path.join(run_dir, "locust_stats.csv"))
    assert "Traceback" not in out + err


def test_master_killed_workers_exit_on_their_own(tmp_path) -> None:
    with start_simulator(["--fixed", "--ttft-ms", "10", "--itl-ms", "10"]) as sim:
        p = _start_run(sim.url, str(tmp_path), "master", extra=[])
        run_dir = os.path.join(tmp_path, "master")
        pids = _wait_streaming(run_dir)
        os.kill(pids["master"], signal.SIGKILL)
        t_kill = time.time()
        out, err = p.communicate(timeout=120)
        waited = time.time() - t_kill
    assert p.returncode == 7  # the master died without results: documented "aborted"
    assert waited < 40, waited  # workers left on their own (watchdog ~10 s), the CLI did not hang
    assert not any(_alive(w) for w in pids["workers"])
    logs = "".join(
        open(os.path.join(run_dir, f)).read() for f in os.listdir(run_dir) if f.startswith("worker-")
    )
    assert "no heartbeat from the master" in logs
    assert "Traceback" not in logs
    # each worker kept its own records on disk
    files = os.listdir(os.path.join(run_dir, "workers"))
    assert len(files) == 2
    total = sum(sum(1 for _ in open(os.path.join(run_dir, "workers", f))) for f in files)
    assert total > 20


def test_torn_records_file_still_gives_a_result_with_a_warning(tmp_path) -> None:
    d = tmp_path / "torn"
    d.mkdir()
    rec = {
        "scenario": "chat",
        "worker": "w",
        "user": 1,
        "seq": 1,
        "endpoint": "chat",
        "t_start": 100.0,
        "chunk_times_us": [10000, 20000],
        "end_us": 21000,
        "prompt_tokens": 5,
        "output_tokens": 2,
    }
    with open(d / "records.jsonl", "w") as fh:
        for i in range(5):
            fh.write(json.dumps(dict(rec, seq=i, t_start=100.0 + i)) + "\n")
        fh.write(json.dumps(rec)[:40])  # the kill cut the last line
    res = write_result(str(d), {"model_id": "m"})
    assert res["completed"] == 5
    assert any("torn" in w for w in res["warnings"])
    assert not (d / "result.json.tmp").exists()  # written to a temp name, then renamed
    assert json.load(open(d / "result.json"))["completed"] == 5
