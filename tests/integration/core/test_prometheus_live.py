"""`vllm-locust run --prometheus-port P`: /metrics of the master, scraped during and after a run against the
embedded simulator, ends with the result's own figures (requests, tokens, goodput, histogram counts and sums);
with --web-ui the master serves before the swarm and keeps the final figures after the test stopped."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestration.launch.ports import free_port
from tests.integration.core.helpers import _kill_run


def _values(text: str) -> dict[str, float]:
    """Sample name -> value summed over its labels (and `NAME{le=...}` for the TTFT buckets)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.name
            if s.name == "vllm_locust_ttft_seconds_bucket":
                key = f"{s.name}{{le={s.labels['le']}}}"
            elif s.name == "vllm_locust_requests_total":
                key = f"{s.name}{{outcome={s.labels['outcome']}}}"
            out[key] = out.get(key, 0.0) + s.value
    return out


@pytest.mark.timeout(240)
def test_scraped_during_and_after_a_run_the_counters_are_the_results(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    run_dir = str(tmp_path / "run")
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--num-prompts",
        "300",
        "--workers",
        "2",
        "--users",
        "4",
        "--output-len",
        "32",
        "--ignore-eos",
        "--goodput",
        "ttft:20",
        "tpot:5",
        "--prometheus-port",
        str(port),
        "--sim-args",
        "--fixed --ttft-ms 5 --itl-ms 3",
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "run",
        "--no-report",
        "--header",
        "X-Secret: sk-SECRET-9",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "VLLM_LOCUST_API_KEY": "sk-SECRET-8"},
    )
    scrapes: list[str] = []

    def scrape() -> None:  # as Prometheus does, at its own pace, until the master has gone
        while proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    scrapes.append(resp.read().decode())
            except OSError:
                pass  # not up yet, or gone
            time.sleep(0.2)

    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    try:
        out, _ = proc.communicate(timeout=200)
    except subprocess.TimeoutExpired:
        _kill_run(run_dir)
        proc.kill()
        raise
    t.join(10)
    assert proc.returncode == 0, out[-3000:]
    res = json.load(open(os.path.join(run_dir, "result.json")))
    assert res["completed"] == 300
    seen = [_values(x) for x in scrapes]
    final = [v for v in seen if v.get("vllm_locust_run_finished") == 1]
    assert final, f"no scrape after the result ({len(scrapes)} scrapes)"  # the master waited for the last one
    during = [
        v.get("vllm_locust_requests_total{outcome=ok}", 0)
        for v in seen
        if not v.get("vllm_locust_run_finished")
    ]
    assert any(0 < n < 300 for n in during), during  # live: figures while the run went on
    last = final[-1]
    assert last["vllm_locust_requests_total{outcome=ok}"] == res["completed"]
    assert last.get("vllm_locust_requests_total{outcome=failed}", 0) == res["failed"]
    assert last["vllm_locust_output_tokens_total"] == res["total_output_tokens"]
    assert last["vllm_locust_input_tokens_total"] == res["total_input_tokens"]
    assert last["vllm_locust_good_requests_total"] == res["goodput"]["good"]
    for m in ("ttft", "tpot", "e2el"):
        assert last[f"vllm_locust_{m}_seconds_count"] == res["completed"], m
        mean_s = res[f"mean_{m}_ms"] / 1e3
        assert last[f"vllm_locust_{m}_seconds_sum"] == pytest.approx(mean_s * res["completed"], rel=1e-6), m
    with open(os.path.join(run_dir, "records.jsonl")) as fh:
        gaps = sum(len(r["chunk_times_us"]) - 1 for r in map(json.loads, fh) if r["error"] is None)
    assert last["vllm_locust_itl_seconds_count"] == gaps > 0  # every gap between two chunks of a request
    assert "vllm_locust_ttft_seconds_bucket{le=0.02}" in last  # the SLO is a bucket edge
    with open(os.path.join(run_dir, "records.jsonl")) as fh:
        by_worker = collections.Counter(r.get("worker") for r in map(json.loads, fh))
    assert last["vllm_locust_requests_in_flight"] == 0
    # the workers whose records are in (on a busy machine one of the two may start its users after the other
    # has taken every request: then it measured nothing and sent nothing)
    assert last["vllm_locust_workers"] == len(by_worker) >= 1, (by_worker, out[-3000:])
    assert not any("SECRET" in x for x in scrapes)


def _scrape(port: int) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return _values(resp.read().decode())
    except OSError:
        return None


@pytest.mark.timeout(180)
def test_web_ui_master_serves_before_the_swarm_and_after_the_test(tmp_path) -> None:  # type: ignore[no-untyped-def]
    web, prom = free_port(), free_port()
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--web-ui",
        "--web-port",
        str(web),
        "--workers",
        "1",
        "--users",
        "4",
        "--num-prompts",
        "40",
        "--output-len",
        "8",
        "--prometheus-port",
        str(prom),
        "--output-dir",
        str(tmp_path),
        "--run-name",
        "r",
        "--no-report",
    ]
    p = subprocess.Popen(cmd, stdout=open(tmp_path / "cli.out", "w"), stderr=subprocess.STDOUT)
    result = tmp_path / "r" / "result.json"
    try:
        deadline = time.time() + 90
        while (before := _scrape(prom)) is None and time.time() < deadline:
            time.sleep(0.3)
        assert before is not None, (tmp_path / "cli.out").read_text()[-2000:]
        assert (
            before.get("vllm_locust_requests_total{outcome=ok}", 0) == 0
            and before["vllm_locust_run_finished"] == 0
        )
        while time.time() < deadline:  # the swarm once the worker is in
            try:
                form = urllib.parse.urlencode({"user_count": 4, "spawn_rate": 4}).encode()
                if json.load(urllib.request.urlopen(f"http://127.0.0.1:{web}/swarm", data=form, timeout=10))[
                    "success"
                ]:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        while not result.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert result.exists(), (tmp_path / "cli.out").read_text()[-2000:]
        after = _scrape(prom)  # the test stopped; the master (and its figures) stay up
        assert after is not None and after["vllm_locust_run_finished"] == 1
        res = json.loads(result.read_text())
        assert after["vllm_locust_requests_total{outcome=ok}"] == res["completed"] == 40
        assert after["vllm_locust_ttft_seconds_count"] == 40
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(60)
