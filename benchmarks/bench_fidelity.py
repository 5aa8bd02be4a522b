"""Timing fidelity: TTFT and ITL error versus ground truth at 16, 64 and 256 streams; where client_bound starts.

The simulator's fixed mode (TTFT 50 ms, ITL 10 ms, 64 tokens, one token per SSE event) is the truth; it runs
pinned to core 0 and `vllm-locust run --workers 1` (closed loop, N users) pinned to core 1. Errors are
reported two ways:
- **vs nominal**: our percentile minus 50 ms (TTFT) / 10 ms (ITL);
- **vs reference**: our percentile minus the same percentile measured by a raw-socket asyncio client
  (benchmarks/common.py, no HTTP library, no JSON) at the same load on the same core, against a fresh
  simulator: the simulator's own lateness (its epoll rounds timers to ms) and the machine's noise are in
  both, so the difference is what our client adds.
The simulator's own emit lateness (``/sim/stats``) is recorded too.

    python benchmarks/bench_fidelity.py [--quick] [--reps 3] [--run-time 12]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from common import (
    ITL_MS,
    TTFT_MS,
    median,
    ours_latencies,
    pctl,
    print_table,
    run_ours,
    run_reference,
    sim_stats,
    start_sim,
    timing_errors,
    write_json,
)

LEVELS = (16, 64, 256)
SEARCH = (32, 128, 512, 1024)  # extra levels for where client_bound starts (one run each)


def ours(streams: int, run_time: float) -> dict[str, Any]:
    """One vllm-locust run at `streams` users against a fresh simulator."""
    with start_sim() as sim:
        r = run_ours(
            sim.url,
            users=streams,
            run_time=run_time,
            workers=1,
            output_len=64,
            tag=f"fid-{streams}",
            sampler=False,
        )
        late = sim_stats(sim.url)["lateness_s"]
    ttft, itl = ours_latencies(r["run_dir"])
    res = r["result"]
    h = next(iter(res.get("client_health", {}).get("workers", {}).values()), {})
    return {
        "streams": streams,
        **timing_errors(ttft, itl),
        "ttft": ttft,
        "itl": itl,
        "client_bound": bool(res.get("client_bound")),
        "cpu_mean": h.get("cpu_mean"),
        "loop_lag_p99_ms": h.get("loop_lag_p99_ms"),
        "sim_late_p50_ms": late["p50"] * 1000,
        "sim_late_p99_ms": late["p99"] * 1000,
        "run_dir": r["run_dir"],
    }


def reference(streams: int, run_time: float) -> dict[str, Any]:
    """The raw-socket reference client at the same load."""
    with start_sim() as sim:
        d = run_reference(sim.url, streams, run_time, output_len=64)
        late = sim_stats(sim.url)["lateness_s"]
    return {
        "streams": streams,
        **timing_errors(d["ttft"], d["itl"]),
        "ttft": d["ttft"],
        "itl": d["itl"],
        "errors": d["errors"],
        "sim_late_p50_ms": late["p50"] * 1000,
        "sim_late_p99_ms": late["p99"] * 1000,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the levels, print the table, write results/fidelity.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 repetition, 8 s runs, no client_bound search")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--run-time", type=float, default=12)
    ap.add_argument("--levels", default="", help="comma-separated stream counts (default 16,64,256)")
    a = ap.parse_args(argv)
    reps, rt = (1, 8.0) if a.quick else (a.reps, a.run_time)
    levels = [int(x) for x in a.levels.split(",")] if a.levels else list(LEVELS)
    rows, runs = [], []
    bound_at: dict[int, bool] = {}
    for n in levels:
        mine, refs = [], []
        for _ in range(reps):
            o = ours(n, rt)
            f = reference(n, rt)
            mine.append(o)
            refs.append(f)
            print(
                f"  {n} streams: ours TTFT {o['ttft_err_p50_ms']:+.2f}/{o['ttft_err_p99_ms']:+.2f} ms, "
                f"ref {f['ttft_err_p50_ms']:+.2f}/{f['ttft_err_p99_ms']:+.2f} ms; client_bound {o['client_bound']}",
                flush=True,
            )
        bound_at[n] = sum(m["client_bound"] for m in mine) * 2 > len(mine)
        row: dict[str, Any] = {"streams": n, "reps": reps}
        for k in ("ttft_err_p50_ms", "ttft_err_p99_ms", "itl_err_p50_ms", "itl_err_p99_ms"):
            row[k] = median([m[k] for m in mine])
            row["ref_" + k] = median([f[k] for f in refs])
            # per repetition: ours minus the reference of the same repetition, then the median
            row["vs_ref_" + k] = median([m[k] - f[k] for m, f in zip(mine, refs, strict=False)])
        row["sim_late_p99_ms"] = median([m["sim_late_p99_ms"] for m in mine])
        row["cpu_mean"] = median([m["cpu_mean"] or 0.0 for m in mine])
        row["loop_lag_p99_ms"] = median([m["loop_lag_p99_ms"] or 0.0 for m in mine])
        row["client_bound"] = f"{sum(m['client_bound'] for m in mine)}/{reps}"
        rows.append(row)
        runs += [{k: v for k, v in m.items() if k not in ("ttft", "itl")} for m in mine]
        runs += [
            {"reference": True, **{k: v for k, v in f.items() if k not in ("ttft", "itl")}} for f in refs
        ]
    if not a.quick and not a.levels:
        for n in sorted(set(SEARCH) | set(levels)):
            if n in bound_at:
                if bound_at[n]:
                    break
                continue
            o = ours(n, rt)
            bound_at[n] = o["client_bound"]
            runs.append({k: v for k, v in o.items() if k not in ("ttft", "itl")})
            print(
                f"  search {n} streams: client_bound {o['client_bound']} (cpu {o['cpu_mean']:.0%}, "
                f"lag p99 {o['loop_lag_p99_ms']:.1f} ms)",
                flush=True,
            )
            if bound_at[n]:
                break
    first_bound = min((n for n, b in bound_at.items() if b), default=None)
    cols = [
        "streams",
        "ttft_err_p50_ms",
        "ttft_err_p99_ms",
        "itl_err_p50_ms",
        "itl_err_p99_ms",
        "ref_ttft_err_p50_ms",
        "ref_ttft_err_p99_ms",
        "vs_ref_ttft_err_p50_ms",
        "vs_ref_ttft_err_p99_ms",
        "vs_ref_itl_err_p99_ms",
        "sim_late_p99_ms",
        "cpu_mean",
        "loop_lag_p99_ms",
        "client_bound",
    ]
    print_table(
        rows, cols, f"timing fidelity vs truth (TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms), median of reps"
    )
    print(f"client_bound first at {first_bound} streams (levels tried: {sorted(bound_at)})")
    path = write_json(
        "fidelity",
        {
            "truth": {"ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "output_tokens": 64},
            "rows": rows,
            "client_bound_from_streams": first_bound,
            "client_bound_levels": bound_at,
            "runs": runs,
            "pctl_note": "percentiles by linear interpolation",
            "p": pctl.__name__,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
