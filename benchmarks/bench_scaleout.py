"""Scale-out: 1, 2, 4, 8 Locust worker processes of one `vllm-locust run`; total streamed tokens/s vs N.

One simulator (fixed mode, TTFT 50 ms, ITL 10 ms, 64 tokens, ``--chunks-per-write 8`` so that it stays far
below its capacity) pinned to core 0; the run (master + N workers) pinned to cores 2..; each worker gets the
same load (``--per-worker`` streams), so the ideal is N x the one-worker throughput (weak scaling). Two figures:
- ``scaling`` = tok/s at N / tok/s at 1 (target >= 0.9 N), and the TTFT error at each N;
- ``tok_per_worker_cpu_s`` (tokens / CPU-seconds of all workers, /proc): if it stays flat as N grows, each
  worker's capacity adds up (workers share nothing but the master).
Needs cores: run it on a machine with >= 10 cores (the lent device machine has 16); on 2 cores only N=1, 2
mean anything (``--max-workers 2``).

    python benchmarks/bench_scaleout.py [--quick] [--reps 2] [--workers 1,2,4,8] [--per-worker 128]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import numpy as np
from common import (
    NCPU,
    PIN,
    median,
    ours_latencies,
    print_table,
    read_records,
    run_ours,
    start_sim,
    timing_errors,
    write_json,
)


def records_window(
    run_dir: str, cpu_samples: list[tuple[float, float]], skip_s: float = 2.0, tail_s: float = 1.0
) -> dict[str, float]:
    """Tokens (chunk arrivals in records.jsonl, one token per chunk) and workers' CPU over the steady window:
    with several simulators behind one port, no single simulator's counter sees every token."""
    times = np.sort(
        np.concatenate(
            [
                r["t_start"] + np.asarray(r["chunk_times_us"], dtype=float) / 1e6
                for r in read_records(run_dir)
                if r.get("chunk_times_us")
            ]
        )
    )
    a, b = times[0] + skip_s, times[-1] - tail_s
    ts = np.array([t for t, _c in cpu_samples])
    cs = np.array([c for _t, c in cpu_samples])
    cpu = float(np.interp(b, ts, cs) - np.interp(a, ts, cs))
    tokens = int(np.searchsorted(times, b) - np.searchsorted(times, a))
    wall = b - a
    return {
        "tokens": tokens,
        "cpu_s": cpu,
        "wall_s": wall,
        "tok_s": tokens / wall,
        "cpu_util": cpu / wall,
        "tok_per_cpu_s": tokens / cpu if cpu > 0 else float("nan"),
    }


def one(n: int, per_worker: int, seconds: float, pin: str | None, sims: int = 1) -> dict[str, Any]:
    """One run with n workers against `sims` simulator processes sharing one port (cores 0..sims-1)."""
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(start_sim(extra=["--chunks-per-write", "8", "--reuse-port"]))
        for i in range(1, sims):
            stack.enter_context(
                start_sim(extra=["--chunks-per-write", "8", "--reuse-port", "--port", str(first.port)], cpu=i)
            )
        r = run_ours(
            first.url,
            users=n * per_worker,
            run_time=seconds,
            workers=n,
            output_len=64,
            pin=pin,
            tag=f"scale-{n}",
        )
    ttft, itl = ours_latencies(r["run_dir"])
    w = records_window(r["run_dir"], r["cpu_samples"]) if sims > 1 else r["window"]
    res = r["result"]
    return {
        "workers": n,
        "streams": n * per_worker,
        "tok_s": w["tok_s"],
        "workers_cpu": w["cpu_util"],
        "tok_per_worker_cpu_s": w["tok_per_cpu_s"],
        "output_throughput": res["output_throughput"],
        "ttft_err_p50_ms": timing_errors(ttft, itl)["ttft_err_p50_ms"],
        "ttft_err_p99_ms": timing_errors(ttft, itl)["ttft_err_p99_ms"],
        "failed": res["failed"],
        "sims": sims,
        "client_bound": bool(res.get("client_bound")),
        "run_dir": r["run_dir"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run each N, print the table, write results/scaleout.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 repetition, 8 s runs")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--run-time", type=float, default=12)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--max-workers", type=int, default=0, help="drop N above this (default: cores - 2)")
    ap.add_argument("--per-worker", type=int, default=128, help="streams per worker")
    ap.add_argument(
        "--sims",
        type=int,
        default=1,
        help="simulator processes on one port (SO_REUSEPORT), "
        "pinned to cores 0..K-1, so that the target is never the bottleneck",
    )
    a = ap.parse_args(argv)
    reps, rt = (1, 8.0) if a.quick else (a.reps, a.run_time)
    cap = a.max_workers or max(1, NCPU - 1 - a.sims)
    ns = [n for n in (int(x) for x in a.workers.split(",")) if n <= cap]
    first_client = max(2, a.sims + 1)
    pin = f"{first_client}-{NCPU - 1}" if PIN and NCPU > first_client else None
    rows, runs = [], []
    for n in ns:
        mine = [one(n, a.per_worker, rt, pin, a.sims) for _ in range(reps)]
        runs += mine
        for m in mine:
            print(
                f"  {n} workers: {m['tok_s']:.0f} tok/s, workers CPU {m['workers_cpu']:.2f} cores, "
                f"{m['tok_per_worker_cpu_s']:.0f} tok/worker-CPU-s",
                flush=True,
            )
        rows.append(
            {
                "workers": n,
                "streams": n * a.per_worker,
                "reps": reps,
                **{
                    k: median([m[k] for m in mine])
                    for k in (
                        "tok_s",
                        "workers_cpu",
                        "tok_per_worker_cpu_s",
                        "ttft_err_p50_ms",
                        "ttft_err_p99_ms",
                    )
                },
                "client_bound": f"{sum(m['client_bound'] for m in mine)}/{reps}",
            }
        )
    base = rows[0]["tok_s"] if rows else float("nan")
    for r in rows:
        r["scaling"] = r["tok_s"] / base
        r["scaling_per_n"] = r["scaling"] / r["workers"]
        r["target_met"] = r["scaling_per_n"] >= 0.9
    print_table(
        rows,
        [
            "workers",
            "streams",
            "tok_s",
            "scaling",
            "scaling_per_n",
            "workers_cpu",
            "tok_per_worker_cpu_s",
            "ttft_err_p50_ms",
            "ttft_err_p99_ms",
            "client_bound",
            "reps",
        ],
        f"scale-out, {a.per_worker} streams per worker, {NCPU} cores (median of reps)",
    )
    path = write_json(
        "scaleout", {"per_worker_streams": a.per_worker, "pin": pin, "rows": rows, "runs": runs}
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
