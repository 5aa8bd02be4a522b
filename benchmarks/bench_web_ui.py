"""Does the web UI disturb the measurement? A worker's capacity with the UI polled vs headless.

Same load both ways (bench_client_capacity's reference: 256 streams, 64 tokens, one token per SSE event,
simulator pinned to core 0, `vllm-locust run --workers 1` pinned to core 1), interleaved:
- headless: `vllm-locust run --headless` as usual;
- web UI: `vllm-locust run --web-ui --run-time T`, the swarm started by the same POST the UI's form sends,
  and a poller doing what an open LLM tab does, twice as often: GET /stats/requests and /llm/stats every 1 s.
Capacity = streamed tokens per worker CPU-second over the steady window (common.Sampler); the TTFT error
against the simulator's fixed 50 ms is reported beside it.

    python benchmarks/bench_web_ui.py [--reps 2] [--run-time 12] [--streams 256]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

from common import (
    CLIENT_CPU,
    PIN,
    RESULTS,
    Sampler,
    median,
    print_table,
    run_ours,
    start_sim,
    vllm_locust_cmd,
    write_json,
)

from orchestration.launch.ports import free_port

TTFT_MS, ITL_MS, OUTPUT_LEN = 50.0, 10.0, 64


def _get(url: str, data: bytes | None = None) -> bytes:
    with urllib.request.urlopen(url, data=data, timeout=10) as resp:
        return bytes(resp.read())


def run_ui(host: str, streams: int, run_time: float, poll_s: float) -> dict[str, Any]:
    """One web-UI run: start through the UI's POST, poll like the tab, stop at --run-time, end with Ctrl-C."""
    port = free_port()
    name = f"webui-{os.getpid()}-{int(time.time())}"
    run_dir = RESULTS / "runs" / name
    cmd = [
        *vllm_locust_cmd(),
        "run",
        "--host",
        host,
        "--workers",
        "1",
        "--users",
        str(streams),
        "--output-len",
        str(OUTPUT_LEN),
        "--input-len",
        "32",
        "--ignore-eos",
        "--output-dir",
        str(RESULTS / "runs"),
        "--run-name",
        name,
        "--no-report",
        "--quiet",
        "--no-server-metrics",
        "--web-ui",
        "--web-port",
        str(port),
        "--run-time",
        f"{int(run_time)}s",
    ]
    if PIN:
        cmd = ["taskset", "-c", str(CLIENT_CPU), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ui = f"http://127.0.0.1:{port}"
    workers: list[int] = []

    def pids() -> list[int]:
        if not workers and (run_dir / "pids.json").exists():
            try:
                workers.extend(json.loads((run_dir / "pids.json").read_text())["workers"])
            except (OSError, ValueError, KeyError):
                pass
        return workers

    sampler = Sampler(host, pids)
    polls = {"n": 0, "bytes": 0}
    halt = threading.Event()

    def poll() -> None:
        while not halt.wait(poll_s):
            for path in ("/stats/requests", "/llm/stats"):
                try:
                    polls["bytes"] += len(_get(ui + path))
                    polls["n"] += 1
                except OSError:
                    pass

    try:
        deadline = time.time() + 90
        while True:  # the UI is up once its workers are connected
            try:
                if json.loads(_get(ui + "/worker-count"))["worker_count"] >= 1:
                    break
            except (OSError, ValueError, KeyError):
                pass
            if time.time() > deadline:
                raise RuntimeError("web UI did not come up")
            time.sleep(0.5)
        sampler.start()
        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        form = urllib.parse.urlencode(
            {"user_count": streams, "spawn_rate": streams * 4, "host": host}
        ).encode()
        _get(ui + "/swarm", form)
        deadline = time.time() + run_time + 90
        while not (run_dir / "result.json").exists() and time.time() < deadline:
            time.sleep(0.5)
    finally:
        halt.set()
        sampler.stop()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    result = json.loads((run_dir / "result.json").read_text())
    return {
        "run_dir": str(run_dir),
        "result": result,
        "window": sampler.window(),
        "polls": polls["n"],
        "poll_bytes": polls["bytes"],
    }


def row(kind: str, r: dict[str, Any]) -> dict[str, Any]:
    """One line of the table."""
    res, w = r["result"], r["window"]
    return {
        "mode": kind,
        "tok_s": w["tok_s"],
        "worker_cpu": w["cpu_util"],
        "tok_per_cpu_s": w["tok_per_cpu_s"],
        "ttft_p50_err_ms": res["median_ttft_ms"] - TTFT_MS,
        "ttft_p99_err_ms": res["p99_ttft_ms"] - TTFT_MS,
        "completed": res["completed"],
        "failed": res["failed"],
        "polls": r.get("polls", 0),
    }


def main() -> int:
    """Interleave headless and web-UI runs; print and save the comparison."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--run-time", type=float, default=12.0)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--poll-s", type=float, default=1.0)
    a = ap.parse_args()
    rows = []
    for rep in range(a.reps):
        for kind in ("headless", "web-ui") if rep % 2 == 0 else ("web-ui", "headless"):
            with start_sim(ITL_MS, TTFT_MS) as sim:
                if kind == "headless":
                    r = run_ours(
                        sim.url,
                        users=a.streams,
                        run_time=a.run_time,
                        workers=1,
                        output_len=OUTPUT_LEN,
                        tag="webui-headless",
                    )
                else:
                    r = run_ui(sim.url, a.streams, a.run_time, a.poll_s)
            rows.append(row(kind, r))
            print(rows[-1], flush=True)
    summary = {}
    for kind in ("headless", "web-ui"):
        summary[kind] = {
            k: median([x[k] for x in rows if x["mode"] == kind])
            for k in ("tok_s", "worker_cpu", "tok_per_cpu_s", "ttft_p50_err_ms", "ttft_p99_err_ms")
        }
    ratio = summary["web-ui"]["tok_per_cpu_s"] / summary["headless"]["tok_per_cpu_s"]
    print_table(
        rows,
        [
            "mode",
            "tok_s",
            "worker_cpu",
            "tok_per_cpu_s",
            "ttft_p50_err_ms",
            "ttft_p99_err_ms",
            "completed",
            "failed",
            "polls",
        ],
        title=f"web UI vs headless, {a.streams} streams",
    )
    print(f"capacity with the UI polled / headless (median tok per worker CPU-s): {ratio:.3f}")
    path = write_json(
        "web_ui",
        {
            "rows": rows,
            "summary": summary,
            "capacity_ratio": ratio,
            "streams": a.streams,
            "run_time_s": a.run_time,
            "poll_s": a.poll_s,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
