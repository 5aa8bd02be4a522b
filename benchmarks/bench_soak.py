"""Soak: a long open-loop run at half the client's capacity against the simulator; memory, counts, lag over time.

The simulator (fixed mode, TTFT 50 ms, ITL 10 ms) pinned to core 0; `vllm-locust run --host SIM --workers N
--request-rate R --run-time Mm` (64 output tokens, Poisson arrivals, seed 0) pinned to core 1. The rate is half
the client's capacity: ``--rate R`` as given, else ``0.5 × C / output_len`` where C is tokens per worker
CPU-second, ``--capacity C`` as given, else measured first by a short closed-loop calibration run (256 streams,
same simulator settings, common.Sampler's /proc window). Every ``--interval`` seconds a thread samples:
- RSS (VmRSS of /proc/PID/status) and CPU seconds of `vllm-locust run` itself, the Locust master and each
  worker (pids from RUN_DIR/pids.json) and the simulator;
- the simulator's /sim/stats (completion requests received, tokens) and the run's RUN_DIR/progress.json.
At the end, from records.jsonl (streamed): per window (5 min) requests, failures, output tok/s, TTFT p50/p99 and
the schedule lag (t_start - t_intended: how late the worker's loop sent each due arrival); records against the
simulator's count of completion requests over the run (its /sim/stats delta, less the preflight's requests);
RSS at start / middle / end and growth per hour (slope of a least-squares line over the steady part: from
10 % into the run, at least 2 min, to its end, the drain and post-processing left out); the workers' loop lag from
the result's client_health. The workers report loop-lag samples to the master per batch, but the master keeps
only their whole-run summary (client_health): there is no loop lag per time to read, so the per-window figure
is the schedule lag, which the same loop's lateness sets.

    nice -n 5 python benchmarks/bench_soak.py [--minutes 30] [--workers 1] [--rate R | --capacity C]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common import (
    CLIENT_CPU,
    ITL_MS,
    PIN,
    RESULTS,
    TTFT_MS,
    cpu_seconds,
    pctl,
    print_table,
    read_records,
    run_ours,
    sim_stats,
    start_sim,
    vllm_locust_cmd,
    write_json,
)

OUTPUT_LEN, INPUT_LEN = 64, 32
MB = 1024.0


def rss_mb(pid: int) -> float | None:
    """Resident set size of a process in MiB (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / MB
    except (OSError, ValueError, IndexError):
        return None
    return None


def read_json(path: Path) -> Any:
    """A JSON file, or None while it is missing or half-written."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class SoakSampler(threading.Thread):
    """Every ``interval`` s: RSS and CPU of every process of the run and of the simulator, sim stats, progress."""

    def __init__(self, sim_url: str, sim_pid: int, launcher_pid: int, run_dir: Path, interval: float) -> None:
        super().__init__(daemon=True)
        self.sim_url, self.run_dir, self.interval = sim_url, run_dir, interval
        self.fixed = {"launcher": launcher_pid, "sim": sim_pid}
        self.samples: list[dict[str, Any]] = []
        self.t0 = time.time()
        self._halt = threading.Event()

    def pids(self) -> dict[str, int]:
        """Process name -> pid (master and workers once pids.json exists)."""
        out = dict(self.fixed)
        p = read_json(self.run_dir / "pids.json") or {}
        if p.get("master"):
            out["master"] = int(p["master"])
        for i, w in enumerate(p.get("workers") or []):
            out[f"worker-{i}"] = int(w)
        return out

    def sample(self) -> dict[str, Any]:
        """One sample now."""
        s: dict[str, Any] = {
            "t": time.time(),
            "elapsed_s": round(time.time() - self.t0, 1),
            "load1": os.getloadavg()[0],  # the machine is shared: how busy it was
            "rss_mb": {},
            "cpu_s": {},
        }
        for name, pid in self.pids().items():
            s["rss_mb"][name] = rss_mb(pid)
            s["cpu_s"][name] = cpu_seconds(pid)
        try:
            st = sim_stats(self.sim_url)
            s["sim"] = {k: st.get(k) for k in ("generate_requests", "served", "generation_tokens", "running")}
            s["sim"]["lateness_p99_s"] = (st.get("lateness_s") or {}).get("p99")
        except (OSError, ValueError):
            s["sim"] = None
        prog = read_json(self.run_dir / "progress.json") or {}
        s["progress"] = {k: prog.get(k) for k in ("ok", "failed", "inflight", "output_tokens", "elapsed_s")}
        return s

    def run(self) -> None:
        while True:
            s = self.sample()
            self.samples.append(s)
            self.say(s)
            if self._halt.wait(self.interval):
                return

    def say(self, s: dict[str, Any]) -> None:
        """One line per sample, for whoever polls the output."""
        rss = " ".join(f"{k}={v:.0f}" for k, v in s["rss_mb"].items() if v is not None)
        p = s["progress"]
        done = (p.get("ok") or 0) + (p.get("failed") or 0)
        sim = s["sim"] or {}
        print(
            f"  [{s['elapsed_s']:7.0f} s] done {done} (failed {p.get('failed') or 0}, in flight {p.get('inflight')}), "
            f"sim requests {sim.get('generate_requests')}; RSS MiB {rss}",
            flush=True,
        )

    def stop(self) -> None:
        """Take a last sample and stop."""
        self._halt.set()
        self.join(30)


def calibrate(sim_url: str, seconds: float) -> dict[str, Any]:
    """Tokens per worker CPU-second of one worker, closed loop, 256 streams (bench_client_capacity's segment@256)."""
    r = run_ours(sim_url, users=256, run_time=seconds, workers=1, output_len=OUTPUT_LEN, tag="soak-calib")
    w = r["window"]
    return {
        "tok_per_cpu_s": w["tok_per_cpu_s"],
        "tok_s": w["tok_s"],
        "worker_cpu": w["cpu_util"],
        "seconds": seconds,
        "run_dir": r["run_dir"],
    }


def fit_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (NaN with fewer than 3 points)."""
    if len(xs) < 3:
        return float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else float("nan")


def steady_start(run_s: float) -> float:
    """Where the steady part of the load starts: 10 % in, at least 2 min (a quarter of a run under 8 min)."""
    return max(0.1 * run_s, min(120.0, 0.25 * run_s))


def rss_rows(samples: list[dict[str, Any]], run_s: float) -> list[dict[str, Any]]:
    """Per process: RSS at start / middle / end of the load, max, and growth per hour over the steady part."""
    names = sorted({n for s in samples for n in s["rss_mb"]}, key=lambda n: (n != "sim", n))
    steady_from = steady_start(run_s)
    rows = []
    for n in names:
        pts = [(s["elapsed_s"], s["rss_mb"][n]) for s in samples if s["rss_mb"].get(n) is not None]
        load = [p for p in pts if p[0] <= run_s] or pts
        steady = [p for p in load if p[0] >= steady_from]
        if not load:
            continue
        mid = min(load, key=lambda p: abs(p[0] - run_s / 2))
        first = steady[0] if steady else load[0]
        slope = fit_slope([p[0] for p in steady], [p[1] for p in steady]) * 3600.0
        rows.append(
            {
                "process": n,
                "rss_start_mb": first[1],
                "rss_mid_mb": mid[1],
                "rss_end_mb": load[-1][1],
                "rss_max_mb": max(p[1] for p in pts),
                "growth_mb_per_h": slope,
                "steady_from_s": first[0],
                "points": len(steady),
            }
        )
    return rows


def cpu_rows(samples: list[dict[str, Any]], run_s: float) -> dict[str, float]:
    """Mean CPU (fraction of one core) of each process over the steady part of the load."""
    steady = [s for s in samples if steady_start(run_s) <= s["elapsed_s"] <= run_s]
    out = {}
    if len(steady) >= 2:
        a, b = steady[0], steady[-1]
        for n, c in b["cpu_s"].items():
            if c is not None and a["cpu_s"].get(n) is not None:
                out[n] = (c - a["cpu_s"][n]) / (b["t"] - a["t"])
    return out


def windows(run_dir: Path, window_s: float) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Per window from the first send: requests, failures, TTFT and schedule lag by t_start; output tok/s by
    completion (t_start + end_us); dropped arrivals (never sent) left out."""
    sent: list[tuple[float, float | None, int, float | None, bool, float]] = []
    counts = {"records": 0, "dropped": 0, "failed": 0}
    for r in read_records(run_dir):
        counts["records"] += 1
        if r.get("error") == "dropped":
            counts["dropped"] += 1
            continue
        c = r.get("chunk_times_us")
        sent.append(
            (
                r["t_start"],
                r.get("t_intended"),
                r.get("output_tokens") or 0,
                c[0] / 1000.0 if c else None,
                r.get("error") is not None,
                r["t_start"] + (r.get("end_us") or 0) / 1e6,
            )
        )
    if not sent:
        return [], counts
    t0, t1 = min(x[0] for x in sent), max(x[0] for x in sent)
    n = max(1, round((t1 - t0) / window_s))  # a last piece shorter than half a window joins the one before
    acc: list[dict[str, Any]] = [{"n": 0, "failed": 0, "tok": 0, "ttft": [], "lag": []} for _ in range(n)]
    for t_start, t_int, tok, ttft, failed, t_end in sent:
        w = acc[min(n - 1, int((t_start - t0) // window_s))]
        w["n"] += 1
        w["failed"] += failed
        counts["failed"] += failed
        if ttft is not None:
            w["ttft"].append(ttft)
        if t_int is not None:
            w["lag"].append((t_start - t_int) * 1000.0)
        acc[max(0, min(n - 1, int((t_end - t0) // window_s)))]["tok"] += tok
    rows = []
    for i, w in enumerate(acc):
        span = t1 - t0 - i * window_s if i == n - 1 else window_s  # the last one: to the last send
        span = max(span, 1e-6)
        rows.append(
            {
                "window": i,
                "start_min": i * window_s / 60.0,
                "span_s": span,
                "requests": w["n"],
                "failed": w["failed"],
                "req_s": w["n"] / span,
                "output_tok_s": w["tok"] / span,
                "ttft_p50_ms": pctl(w["ttft"], 50),
                "ttft_p99_ms": pctl(w["ttft"], 99),
                "sched_lag_p50_ms": pctl(w["lag"], 50),
                "sched_lag_p99_ms": pctl(w["lag"], 99),
                "sched_lag_max_ms": max(w["lag"]) if w["lag"] else float("nan"),
            }
        )
    return rows, counts


def preflight_requests(run_dir: Path) -> int:
    """The preflight's requests to the server (preflight.json's stream attempts; 1 when unknown)."""
    p = read_json(run_dir / "preflight.json")
    try:
        return len(p["stream_attempts"])
    except (TypeError, KeyError):
        return 1


def soak_cmd(host: str, rate: float, minutes: float, workers: int, name: str) -> list[str]:
    """`vllm-locust run`, open loop at ``rate`` for ``minutes``, pinned to the client core."""
    # in-flight slots: twice the requests a 64-token stream keeps in flight at this rate (Little's law), so the cap
    # (launcher.DEFAULT_OPEN_LOOP_SLOTS = 256 without it) never holds the schedule back
    slots = max(256, math.ceil(2 * rate * (TTFT_MS + (OUTPUT_LEN - 1) * ITL_MS) / 1000.0))
    cmd = [
        *vllm_locust_cmd(),
        "run",
        "--host",
        host,
        "--workers",
        str(workers),
        "--request-rate",
        f"{rate:.1f}",
        "--max-concurrency",
        str(slots),
        "--run-time",
        f"{int(minutes * 60)}s",
        "--output-len",
        str(OUTPUT_LEN),
        "--input-len",
        str(INPUT_LEN),
        "--ignore-eos",
        "--seed",
        "0",
        "--output-dir",
        str(RESULTS / "runs"),
        "--run-name",
        name,
        "--no-report",
        "--quiet",
        "--no-server-metrics",
    ]
    return ["taskset", "-c", str(CLIENT_CPU), *cmd] if PIN else cmd


def code_state() -> dict[str, Any]:
    """The checkout measured: HEAD and how many files differ from it (other engineers edit the tree)."""

    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=RESULTS.parents[1], capture_output=True, text=True, timeout=30)
        return r.stdout.strip()

    return {"head": git("rev-parse", "HEAD"), "files_changed": len(git("status", "--short").splitlines())}


def main(argv: list[str] | None = None) -> int:
    """Calibrate (unless told the rate), soak, print the tables, write results/soak.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--minutes", type=float, default=30.0, help="length of the load (default 30; 2 for a smoke test)"
    )
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rate", type=float, default=None, help="request rate (default: half the capacity)")
    ap.add_argument("--capacity", type=float, default=None, help="tok per worker CPU-s (default: calibrate)")
    ap.add_argument("--calib-seconds", type=float, default=15.0)
    ap.add_argument("--interval", type=float, default=10.0, help="sampling period, seconds")
    ap.add_argument(
        "--window-min", type=float, default=None, help="window in minutes (default 5; runs < 20 min: 1/4)"
    )
    a = ap.parse_args(argv)
    run_s = a.minutes * 60.0
    window_s = (a.window_min if a.window_min else (5.0 if a.minutes >= 20 else a.minutes / 4)) * 60.0
    load0, code = os.getloadavg(), code_state()
    with start_sim() as sim:
        calib = None
        if a.rate is not None:
            rate, how = a.rate, "given (--rate)"
        else:
            if a.capacity is not None:
                cap, how = a.capacity, f"--capacity {a.capacity:g} tok per worker CPU-s"
            else:
                calib = calibrate(sim.url, a.calib_seconds)
                cap = calib["tok_per_cpu_s"]
                how = f"calibrated: {cap:,.0f} tok per worker CPU-s ({a.calib_seconds:g} s, 256 streams, 1 worker)"
            rate = 0.5 * cap * a.workers / OUTPUT_LEN
            if not rate > 0:  # NaN: the calibration run streamed nothing
                print(f"calibration failed (no tokens): see {calib['run_dir'] if calib else '?'}", flush=True)
                return 1
        print(
            f"soak: {a.minutes:g} min at {rate:.1f} req/s × {OUTPUT_LEN} tokens = {rate * OUTPUT_LEN:,.0f} tok/s "
            f"offered, {a.workers} worker(s); rate {how}",
            flush=True,
        )
        before = sim_stats(sim.url)
        name = f"soak-{os.getpid()}-{int(time.time())}"
        run_dir = RESULTS / "runs" / name
        cmd = soak_cmd(sim.url, rate, a.minutes, a.workers, name)
        (RESULTS / "runs").mkdir(parents=True, exist_ok=True)
        log = open(RESULTS / "runs" / f"{name}.out", "wb")  # noqa: SIM115 (held for the child's lifetime)
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        smp = SoakSampler(sim.url, sim.pid, proc.pid, run_dir, a.interval)
        smp.start()
        try:
            rc = proc.wait(timeout=run_s + 900)
        finally:
            if proc.poll() is None:
                proc.kill()
            smp.stop()
            log.close()
        wall = time.time() - t0
        after = sim_stats(sim.url)
    load1 = os.getloadavg()
    result = read_json(run_dir / "result.json")
    if result is None:
        print(f"vllm-locust run failed ({rc}): {(RESULTS / 'runs' / f'{name}.out').read_text()[-3000:]}")
        return 1
    wins, counts = windows(run_dir, window_s)
    pre = preflight_requests(run_dir)
    served_load = int(after["generate_requests"]) - int(before["generate_requests"]) - pre
    sent = counts["records"] - counts["dropped"]
    delta = {k: int(after[k]) - int(before[k]) for k in ("generate_requests", "generation_tokens")}
    count = {
        "records": counts["records"],
        "dropped": counts["dropped"],  # arrivals never sent (recorded, not served)
        "sent": sent,
        "failed": counts["failed"],
        "server_requests_delta": delta["generate_requests"],
        "preflight_requests": pre,
        "server_load_requests": served_load,
        "missing_vs_server": served_load - sent,
        "records_output_tokens": result.get("total_output_tokens"),
        "server_tokens_delta": delta["generation_tokens"],  # the preflight's few tokens among them
        "result_completed": result.get("completed"),
        "result_interrupted": result.get("interrupted"),
        "data_loss_complete": (result.get("data_loss") or {}).get("complete"),
    }
    rss = rss_rows(smp.samples, run_s)
    cpu = cpu_rows(smp.samples, run_s)
    health = result.get("client_health") or {}
    lag = [
        {"worker": w, **{k: v for k, v in h.items() if k.startswith(("loop_lag", "cpu", "gc_"))}}
        for w, h in (health.get("workers") or {}).items()
    ]
    sched = (result.get("arrivals") or {}).get("schedule_lag_ms") or {}
    loads = [x["load1"] for x in smp.samples]
    print_table(
        rss,
        [
            "process",
            "rss_start_mb",
            "rss_mid_mb",
            "rss_end_mb",
            "rss_max_mb",
            "growth_mb_per_h",
            "steady_from_s",
            "points",
        ],
        "RSS (MiB) and growth per hour over the steady part",
    )
    print_table(
        [{"process": k, "cpu_pct": 100 * v} for k, v in cpu.items()],
        ["process", "cpu_pct"],
        "mean CPU, steady part",
    )
    print_table(
        wins,
        [
            "window",
            "start_min",
            "requests",
            "failed",
            "req_s",
            "output_tok_s",
            "ttft_p50_ms",
            "ttft_p99_ms",
            "sched_lag_p50_ms",
            "sched_lag_p99_ms",
            "sched_lag_max_ms",
        ],
        f"per {window_s / 60:g}-minute window from the first send (records; tok/s by completion)",
    )
    print_table(
        [{"count": k, "value": v} for k, v in count.items()],
        ["count", "value"],
        "records vs the simulator's count of completion requests",
    )
    print_table(
        lag,
        [
            "worker",
            "cpu_mean",
            "cpu_max",
            "loop_lag_p50_ms",
            "loop_lag_p99_ms",
            "loop_lag_max_ms",
            "gc_collections",
            "gc_pause_max_ms",
        ],
        "loop lag, whole run (client_health; no per-time samples kept)",
    )
    print(
        f"\nrc {rc}, wall {wall:.0f} s; result: output {result.get('output_throughput')} tok/s, failed "
        f"{result.get('failed')}, client_bound {result.get('client_bound')}; schedule lag (whole run) p50 "
        f"{sched.get('median')} / p99 {sched.get('p99')} / max {sched.get('max')} ms; load average "
        f"{load0[0]:.2f} at start, {load1[0]:.2f} at end, {min(loads, default=0):.2f}-{max(loads, default=0):.2f} "
        f"over the samples"
    )
    path = write_json(
        "soak",
        {
            "code_at_start": code,
            "minutes": a.minutes,
            "workers": a.workers,
            "rate": rate,
            "rate_from": how,
            "calibration": calib,
            "output_len": OUTPUT_LEN,
            "window_s": window_s,
            "command": cmd,
            "rc": rc,
            "wall_s": wall,
            "run_dir": str(run_dir),
            "load_avg_end": load1,
            "rss": rss,
            "cpu": cpu,
            "windows": wins,
            "counts": count,
            "loop_lag": lag,
            "schedule_lag_ms": sched,
            "exit_code": result.get("exit_code"),
            "client_bound": result.get("client_bound"),
            "output_throughput": result.get("output_throughput"),
            "samples": smp.samples,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
