"""Event-loop lag and the TTFT error it causes, at many streams: this checkout against another.

`vllm-locust run --users STREAMS --workers W --run-time S` (closed loop, `--ignore-eos`), each code under
test run in turn, interleaved over --reps, with random prompts and (--tokenizer) exact-length prompts.
Reported per variant (median over the reps):
- loop lag p50 / p99 / max (ms): the workers' own health sampler (client_health.json: the extra delay of
  a 50 ms gevent sleep); p50 is the median over the workers, p99 and max the worst worker;
- worker CPU (mean of a core, the busiest worker) and the client_bound verdict;
- TTFT error p50 / p99 (ms), client minus truth: against the simulator (fixed mode, TTFT 50 ms, ITL 10 ms,
  started here) the truth is 50 ms for every request; against a real server (--host) it is the server's own
  TTFT histogram (vLLM's vllm:time_to_first_token_seconds, sampled from /metrics around the run:
  bucket-interpolated percentiles, so only the mean difference is precise; it is reported too);
  with the simulator also the p99 of the steady part (requests from 2 s after the first one on);
- lag_runq_share: of the loop lag in samples over 5 ms, the share the loop's thread spent waiting for a CPU
  (Linux schedstat): near 1, the machine was busy (other processes); near 0, our own code held the loop.
--trace adds one traced run per variant (benchmarks/loop_trace: every loop iteration over 5 ms, its wall and
CPU time and the greenlets that ran in it) and prints what held the loop; traced runs are not in the table.
Its counts per 1,000 completed requests: every greenlet run over BENCH_LOOP_HOLD_MS (0.5) on the loop's thread
by where it yielded (wall and CPU ms), and the prompt builders' and tokenizer's calls by thread (`[loop]`:
each held the loop; `[thread]`: built off it, vllm_users/workload/prompt_ahead.py).

    python benchmarks/bench_loop_lag.py [--streams 256] [--workers 2] [--seconds 20] [--reps 2]
        [--other OLD_CHECKOUT] [--tokenizer PATH] [--input-len 128] [--output-len 64] [--trace]
    python benchmarks/bench_loop_lag.py --host http://127.0.0.1:8000 --model M --tokenizer PATH --workers 4

It prints a table and writes benchmarks/results/loop_lag.json; it asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import RESULTS, ROOT, TTFT_MS, median, pctl, print_table, read_records, start_sim, write_json

TRACER = Path(__file__).resolve().parent / "loop_trace"
# "steady": requests started this long after the run's first one. A closed loop's first wave (every user at
# once) queues in the single-core simulator, and at 256 streams it alone makes the p99 over a 20 s run
STEADY_AFTER_S = 2.0


def run_one(
    code: str, host: str, a: argparse.Namespace, tokenizer: str, name: str, trace: bool
) -> dict[str, Any]:
    """One `vllm-locust run` of the checkout at `code`; its run directory's figures."""
    out_dir = RESULTS / "runs"
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--host",
        host,
        "--workers",
        str(a.workers),
        "--input-len",
        str(a.input_len),
        "--output-len",
        str(a.output_len),
        "--ignore-eos",
        "--output-dir",
        str(out_dir),
        "--run-name",
        name,
        "--no-report",
        "--quiet",
        "--seed",
        str(int(time.time()) % 100_000),
    ]
    if a.request_rate:  # open loop: --streams is the in-flight cap (users)
        cmd += [
            "--request-rate",
            str(a.request_rate),
            "--max-concurrency",
            str(a.streams),
            "--num-prompts",
            str(a.num_prompts or int(a.request_rate * a.seconds)),
        ]
    else:
        cmd += ["--users", str(a.streams), "--run-time", f"{a.seconds}s"]
    if a.model:
        cmd += ["--model", a.model]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    if not a.host:
        cmd += ["--no-server-metrics"]  # the simulator's truth is fixed; a real server's comes from /metrics
    path = [
        *([str(TRACER)] if trace else []),
        code,
        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    run_dir = out_dir / name
    if trace:
        env["BENCH_LOOP_TRACE"] = str(run_dir) + ".trace"
    p = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True, timeout=a.seconds + 240)
    if not (run_dir / "result.json").exists():
        raise RuntimeError(f"run {name} failed ({p.returncode}): {p.stderr[-2000:]}{p.stdout[-1000:]}")
    row = figures(run_dir, bool(a.host))
    return row | ({"trace": read_trace(str(run_dir) + ".trace", row["completed"] or 0)} if trace else {})


def figures(run_dir: Path, real_server: bool) -> dict[str, Any]:
    """Loop lag, CPU and the TTFT error of one run."""
    res = json.loads((run_dir / "result.json").read_text())
    health = json.loads((run_dir / "client_health.json").read_text())
    ws = list(health.get("workers", {}).values())
    started: list[tuple[float, float]] = []  # (t_start, TTFT ms) of every answered request
    sched: list[float] = []
    for r in read_records(run_dir):
        if r.get("t_intended") is not None and r.get("error") != "dropped":
            sched.append((r["t_start"] - r["t_intended"]) * 1000.0)
        if r.get("error") is None and r.get("chunk_times_us"):
            started.append((r["t_start"], r["chunk_times_us"][0] / 1000.0))
    first = min((t for t, _ in started), default=0.0)
    steady = [x for t, x in started if t >= first + STEADY_AFTER_S]
    ttft = [x for _, x in started]
    row: dict[str, Any] = {
        "run_dir": str(run_dir),
        "completed": res.get("completed"),
        "output_tok_s": res.get("output_throughput"),
        "lag_p50_ms": median([w["loop_lag_p50_ms"] for w in ws]),
        "lag_p99_ms": max((w["loop_lag_p99_ms"] for w in ws), default=float("nan")),
        "lag_max_ms": max((w["loop_lag_max_ms"] for w in ws), default=float("nan")),
        "gc_pause_max_ms": max((w.get("gc_pause_max_ms", 0.0) for w in ws), default=float("nan")),
        "cpu_max": max((w["cpu_mean"] for w in ws), default=float("nan")),
        "client_bound": bool(health.get("client_bound")),
        # the share of the lag (samples over 5 ms) that the loop's thread spent waiting for a CPU: the machine
        "lag_runq_share": median([w["lag_runq_share"] for w in ws if w.get("lag_runq_share") is not None]),
    }
    if sched:  # open loop: t_start - t_intended of every arrival sent, from the first one on
        row |= {
            "sched_lag_p50_ms": pctl(sched, 50),
            "sched_lag_p99_ms": pctl(sched, 99),
            "sched_lag_max_ms": max(sched),
            "late_over_10ms": sum(x > 10.0 for x in sched),
        }
    if not real_server:
        row["ttft_err_p50_ms"] = pctl(ttft, 50) - TTFT_MS
        row["ttft_err_p99_ms"] = pctl(ttft, 99) - TTFT_MS
        row["ttft_err_mean_ms"] = sum(ttft) / len(ttft) - TTFT_MS if ttft else float("nan")
        row["steady_ttft_err_p99_ms"] = pctl(steady, 99) - TTFT_MS
        return row
    from orchestration.server.metrics_sampler import summarize_file

    server = (summarize_file(str(run_dir)) or {}).get("ttft_ms") or {}
    for k, key in (("p50", "p50"), ("p99", "p99"), ("mean", "mean")):
        mine = (sum(ttft) / len(ttft) if ttft else float("nan")) if k == "mean" else pctl(ttft, float(k[1:]))
        row[f"ttft_err_{k}_ms"] = mine - server[key] if key in server else float("nan")
    return row


def read_trace(prefix: str, completed: int = 0) -> dict[str, Any]:
    """What held the workers' loops: iterations over 5 ms, on CPU (code) or off it (the machine); and, summed
    over the workers per 1,000 completed requests, the greenlet runs that held the loop (by where they yielded)
    and the prompt builders' and tokenizer's calls by thread (`[loop]` held the loop, `[thread]` did not)."""
    spans: list[dict[str, Any]] = []
    holds: dict[str, list[float]] = {}
    calls: dict[str, list[float]] = {}
    for f in glob.glob(prefix + ".*"):
        with open(f) as fh:
            for x in (json.loads(x) for x in fh if x.strip()):
                if "holds" not in x:
                    spans.append(x)
                    continue
                for src, dst in ((x["holds"], holds), (x.get("calls") or {}, calls)):
                    for k, (n, total, mx, *cpu) in src.items():
                        d = dst.setdefault(k, [0, 0.0, 0.0, 0.0])
                        d[0], d[1], d[2] = d[0] + n, d[1] + total, max(d[2], mx)
                        d[3] += cpu[0] if cpu else float("nan")
    on_cpu = [s for s in spans if s["cpu_ms"] >= 0.7 * s["wall_ms"]]
    where: dict[str, list[float]] = {}
    for s in on_cpu:
        top = s["greenlets"][0][2] if s["greenlets"] else "hub (reactor reads, timers, callbacks)"
        where.setdefault(top, []).append(s["cpu_ms"])
    top = sorted(where.items(), key=lambda kv: -sum(kv[1]))[:6]
    return {
        "spans_over_5ms": len(spans),
        "on_cpu": len(on_cpu),
        "off_cpu": len(spans) - len(on_cpu),
        "max_cpu_ms": max((s["cpu_ms"] for s in spans), default=0.0),
        "max_wall_ms": max((s["wall_ms"] for s in spans), default=0.0),
        "top_on_cpu": [
            {"where": w, "n": len(v), "cpu_ms_sum": round(sum(v), 1), "cpu_ms_max": max(v)} for w, v in top
        ],
        "completed": completed,
        "holds_per_1000": per_1000(holds, completed, 8),
        "calls_per_1000": per_1000(calls, completed, 12),
    }


def per_1000(table: dict[str, list[float]], completed: int, top: int) -> list[dict[str, Any]]:
    """The `top` entries by total time: calls, wall ms and the loop thread's CPU ms (holds; NaN for calls,
    whose CPU is not taken) per 1,000 completed requests, and the longest one."""
    k = 1000.0 / completed if completed else float("nan")
    rows = sorted(table.items(), key=lambda kv: -kv[1][1])[:top]
    return [
        {
            "where": w,
            "n": round(n * k, 1),
            "ms": round(total * k, 1),
            "cpu_ms": round(cpu * k, 1),
            "max_ms": round(mx, 2),
        }
        for w, (n, total, mx, cpu) in rows
    ]


@contextlib.contextmanager
def target(a: argparse.Namespace) -> Iterator[str]:
    """The server under test: --host, else the simulator in fixed mode (TTFT 50 ms, ITL 10 ms)."""
    if a.host:
        yield a.host
        return
    with start_sim() as sim:
        yield sim.url


def main(argv: list[str] | None = None) -> int:
    """Run every (code, prompts) variant --reps times interleaved; print the medians; write loop_lag.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="", help="a real server (default: start the simulator, fixed mode)")
    ap.add_argument("--model", default="", help="the served model (default: the server's only one)")
    ap.add_argument("--tokenizer", default="", help="also run with exact-length prompts from this tokenizer")
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument(
        "--other", default="", help="another checkout's root (e.g. `git archive` of main) to compare"
    )
    ap.add_argument("--no-random", action="store_true", help="only the --tokenizer prompts")
    ap.add_argument("--trace", action="store_true", help="one traced run per variant: what held the loop")
    ap.add_argument(
        "--request-rate",
        type=float,
        default=0.0,
        help="open loop at this rate (--streams: --max-concurrency); adds the schedule lag",
    )
    ap.add_argument("--num-prompts", type=int, default=0, help="open loop: arrivals (default rate x seconds)")
    a = ap.parse_args(argv)
    if a.tokenizer:  # each run's working directory is its checkout
        a.tokenizer = str(Path(a.tokenizer).resolve())
    codes = {"this": str(ROOT)} | ({"other": str(Path(a.other).resolve())} if a.other else {})
    prompts = ([] if a.no_random else ["random"]) + (["tokenizer"] if a.tokenizer else [])
    variants = [(c, pr) for pr in prompts for c in codes]
    runs: dict[str, list[dict[str, Any]]] = {f"{c}/{pr}": [] for c, pr in variants}
    traces: dict[str, Any] = {}
    with target(a) as host:
        for rep in range(a.reps):
            for c, pr in variants if rep % 2 == 0 else variants[::-1]:  # ABBA: drift hits both alike
                key = f"{c}/{pr}"
                x = run_one(
                    codes[c],
                    host,
                    a,
                    a.tokenizer if pr == "tokenizer" else "",
                    f"looplag-{c}-{pr}-{os.getpid()}-{rep}",
                    trace=False,
                )
                runs[key].append(x)
                print(
                    f"  {key} rep {rep}: lag p50/p99/max {x['lag_p50_ms']:.2f}/{x['lag_p99_ms']:.2f}/"
                    f"{x['lag_max_ms']:.1f} ms, TTFT err p50/p99 {x['ttft_err_p50_ms']:+.2f}/"
                    f"{x['ttft_err_p99_ms']:+.2f} ms, cpu {x['cpu_max']:.0%}",
                    flush=True,
                )
        if a.trace:
            for c, pr in variants:
                key = f"{c}/{pr}"
                x = run_one(
                    codes[c],
                    host,
                    a,
                    a.tokenizer if pr == "tokenizer" else "",
                    f"looplag-trace-{c}-{pr}-{os.getpid()}",
                    trace=True,
                )
                traces[key] = x["trace"]
                print(f"  traced {key}: {json.dumps(x['trace'], indent=1)}", flush=True)
    cols = [
        "lag_p50_ms",
        "lag_p99_ms",
        "lag_max_ms",
        "ttft_err_p50_ms",
        "ttft_err_p99_ms",
        "ttft_err_mean_ms",
        *([] if a.host else ["steady_ttft_err_p99_ms"]),
        "cpu_max",
        "gc_pause_max_ms",
        "lag_runq_share",
        "output_tok_s",
    ]
    if a.request_rate:
        cols += ["sched_lag_p50_ms", "sched_lag_p99_ms", "sched_lag_max_ms", "late_over_10ms"]
    rows = []
    for key, xs in runs.items():
        row: dict[str, Any] = {"variant": key, "reps": len(xs)}
        row |= {k: median([x[k] for x in xs]) for k in cols}
        row["client_bound"] = f"{sum(x['client_bound'] for x in xs)}/{len(xs)}"
        rows.append(row)
    truth = "server's TTFT histogram" if a.host else f"truth {TTFT_MS:g} ms"
    load = (
        f"open loop {a.request_rate:g} req/s, cap {a.streams}" if a.request_rate else f"{a.streams} streams"
    )
    print_table(
        rows,
        ["variant", "reps", *cols, "client_bound"],
        f"{load} over {a.workers} workers, {a.seconds} s, TTFT error vs {truth} (medians)",
    )
    path = write_json("loop_lag", {"args": vars(a), "rows": rows, "runs": runs, "traces": traces})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
