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
import sys
from typing import Any

from common import NCPU, median, ours_latencies, print_table, run_ours, start_sim, timing_errors, write_json


def one(n: int, per_worker: int, seconds: float, pin: str | None) -> dict[str, Any]:
    """One run with n workers."""
    with start_sim(extra=["--chunks-per-write", "8"]) as sim:
        r = run_ours(
            sim.url,
            users=n * per_worker,
            run_time=seconds,
            workers=n,
            output_len=64,
            pin=pin,
            tag=f"scale-{n}",
        )
    ttft, itl = ours_latencies(r["run_dir"])
    w = r["window"]
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
    a = ap.parse_args(argv)
    reps, rt = (1, 8.0) if a.quick else (a.reps, a.run_time)
    cap = a.max_workers or max(1, NCPU - 2)
    ns = [n for n in (int(x) for x in a.workers.split(",")) if n <= cap]
    pin = f"2-{NCPU - 1}" if NCPU >= 4 else None
    rows, runs = [], []
    for n in ns:
        mine = [one(n, a.per_worker, rt, pin) for _ in range(reps)]
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
