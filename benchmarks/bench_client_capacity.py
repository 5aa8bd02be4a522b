"""Client capacity: streamed tokens per worker CPU-second, one Locust worker, at 64 and 256 streams.

Simulator (fixed mode) pinned to core 0; `vllm-locust run --workers 1` (master + worker) pinned to core 1
with ``taskset -c 1``. Worker CPU-seconds come from /proc/PID/stat (utime + stime) of the worker pid in
RUN_DIR/pids.json, polled every 0.25 s; tokens from the simulator's ``generation_tokens`` counter over the
same steady window (common.py explains the window). client_health cpu_mean is kept as a cross-check.

Two shapes of traffic, 64 output tokens per request:
- ``segment``: one token per SSE event and per TCP write (the worst case for the client);
- ``burst``: 8 events per TCP write (``--chunks-per-write 8``), like a busy server's coalesced writes.

    python benchmarks/bench_client_capacity.py [--quick] [--reps 3] [--run-time 12]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from common import median, print_table, run_ours, start_sim, write_json

# (mode, streams) -> simulator flags. segment@256 is the reference load (256 x 64 tok / 0.68 s = 24k tok/s)
LOADS: dict[tuple[str, int], dict[str, Any]] = {
    ("segment", 64): {"ttft_ms": 50, "itl_ms": 2.5, "extra": []},
    ("segment", 256): {"ttft_ms": 50, "itl_ms": 10, "extra": []},
    ("burst", 64): {"ttft_ms": 10, "itl_ms": 0.5, "extra": ["--chunks-per-write", "8"]},
    ("burst", 256): {"ttft_ms": 10, "itl_ms": 2, "extra": ["--chunks-per-write", "8"]},
}


def one(mode: str, streams: int, run_time: float) -> dict[str, Any]:
    """One run at one load against a fresh simulator."""
    cfg = LOADS[(mode, streams)]
    with start_sim(cfg["itl_ms"], cfg["ttft_ms"], cfg["extra"]) as sim:
        r = run_ours(
            sim.url, users=streams, run_time=run_time, workers=1, output_len=64, tag=f"cap-{mode}-{streams}"
        )
    w = r["window"]
    res = r["result"]
    health = next(iter(res.get("client_health", {}).get("workers", {}).values()), {})
    return {
        "mode": mode,
        "streams": streams,
        "itl_ms": cfg["itl_ms"],
        "tok_s": w["tok_s"],
        "worker_cpu": w["cpu_util"],
        "tok_per_cpu_s": w["tok_per_cpu_s"],
        "health_cpu_mean": health.get("cpu_mean"),
        "tok_per_cpu_s_health": res["output_throughput"] / health["cpu_mean"]
        if health.get("cpu_mean")
        else None,
        "ttft_p50_ms": res["median_ttft_ms"],
        "ttft_p99_ms": res["p99_ttft_ms"],
        "client_bound": res.get("client_bound"),
        "failed": res["failed"],
        "run_dir": r["run_dir"],
    }


def main(argv: list[str] | None = None) -> int:
    """Run every load ``--reps`` times, print the medians, write results/client_capacity.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 repetition, 8 s runs")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--run-time", type=float, default=12)
    ap.add_argument("--only", default="", help="e.g. segment:256")
    a = ap.parse_args(argv)
    reps, rt = (1, 8.0) if a.quick else (a.reps, a.run_time)
    loads = list(LOADS)
    if a.only:
        m, s = a.only.split(":")
        loads = [(m, int(s))]
    runs: list[dict[str, Any]] = []
    rows = []
    for mode, streams in loads:
        mine = []
        for _ in range(reps):
            x = one(mode, streams, rt)
            runs.append(x)
            mine.append(x)
            print(
                f"  {mode}@{streams}: {x['tok_s']:.0f} tok/s, worker CPU {x['worker_cpu']:.0%}, "
                f"{x['tok_per_cpu_s']:.0f} tok/CPU-s",
                flush=True,
            )
        rows.append(
            {
                k: (median([m[k] for m in mine]) if isinstance(mine[0][k], float) else mine[0][k])
                for k in (
                    "mode",
                    "streams",
                    "itl_ms",
                    "tok_s",
                    "worker_cpu",
                    "tok_per_cpu_s",
                    "health_cpu_mean",
                    "tok_per_cpu_s_health",
                    "ttft_p50_ms",
                    "ttft_p99_ms",
                )
            }
            | {"client_bound": sum(bool(m["client_bound"]) for m in mine), "reps": len(mine)}
        )
    print_table(
        rows,
        [
            "mode",
            "streams",
            "itl_ms",
            "tok_s",
            "worker_cpu",
            "tok_per_cpu_s",
            "tok_per_cpu_s_health",
            "ttft_p50_ms",
            "ttft_p99_ms",
            "client_bound",
            "reps",
        ],
        "client capacity (median of reps; tok_per_cpu_s from /proc of the worker)",
    )
    targets = {"segment": 40_000, "burst": 100_000}
    for r in rows:
        r["target_tok_per_cpu_s"] = targets[r["mode"]]
        r["target_met"] = r["tok_per_cpu_s"] >= targets[r["mode"]]
    path = write_json(
        "client_capacity",
        {
            "method": "worker /proc utime+stime over the steady window; tokens from "
            "the simulator's generation_tokens",
            "rows": rows,
            "runs": runs,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
