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
    python benchmarks/bench_fidelity.py --levels 64,256 --reps 3 --gc default,freeze,gen0:5000,freeze+gen0:5000

`--gc` runs each garbage-collector variant of our client (VLLM_LOCUST_GC_FREEZE / VLLM_LOCUST_GC_GEN0 in the
workers) in every repetition, interleaved with one reference run, and adds a row per variant with the workers'
own GC counts and pauses (client_health).
"""

from __future__ import annotations

import argparse
import os
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
    sim_stats,
    start_sim,
    timing_errors,
    write_json,
)
from reference_client import run_reference

LEVELS = (16, 64, 256)
SEARCH = (32, 128, 512, 1024)  # extra levels for where client_bound starts (one run each)


GC_ENV = ("VLLM_LOCUST_GC_FREEZE", "VLLM_LOCUST_GC_GEN0")


def gc_env(variant: str) -> dict[str, str]:
    """`default`, `freeze`, `gen0:N` or `freeze+gen0:N` as the workers' environment."""
    env = {k: "0" for k in GC_ENV}
    for part in variant.split("+"):
        if part == "freeze":
            env["VLLM_LOCUST_GC_FREEZE"] = "1"
        elif part.startswith("gen0:") and part[5:].isdigit():
            env["VLLM_LOCUST_GC_GEN0"] = part[5:]
        elif part != "default":
            raise SystemExit(f"--gc: {variant!r} is not default, freeze, gen0:N or freeze+gen0:N")
    return env


def ours(streams: int, run_time: float, gc_variant: str = "default") -> dict[str, Any]:
    """One vllm-locust run at `streams` users against a fresh simulator (workers under `gc_variant`)."""
    saved = {k: os.environ.get(k) for k in GC_ENV}
    os.environ.update(gc_env(gc_variant))  # inherited by `vllm-locust run`, its master and workers
    try:
        return _ours(streams, run_time, gc_variant)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _ours(streams: int, run_time: float, gc_variant: str) -> dict[str, Any]:
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
        "gc": gc_variant,
        **timing_errors(ttft, itl),
        "ttft": ttft,
        "itl": itl,
        "client_bound": bool(res.get("client_bound")),
        "gc_collections": h.get("gc_collections"),
        "gc_total_ms": h.get("gc_total_ms"),
        "gc_pause_max_ms": h.get("gc_pause_max_ms"),
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


def _row(n: int, variant: str, mine: list[dict[str, Any]], refs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repetitions of one level and GC variant; `vs_ref_*` pairs each run with its repetition's
    reference."""
    reps = len(mine)
    row: dict[str, Any] = {"streams": n, "gc": variant, "reps": reps}
    for k in ("ttft_err_p50_ms", "ttft_err_p99_ms", "itl_err_p50_ms", "itl_err_p99_ms"):
        row[k] = median([m[k] for m in mine])
        row["ref_" + k] = median([f[k] for f in refs])
        row["vs_ref_" + k] = median([m[k] - f[k] for m, f in zip(mine, refs, strict=False)])
    row["sim_late_p99_ms"] = median([m["sim_late_p99_ms"] for m in mine])
    row["cpu_mean"] = median([m["cpu_mean"] or 0.0 for m in mine])
    row["loop_lag_p99_ms"] = median([m["loop_lag_p99_ms"] or 0.0 for m in mine])
    row["gc_collections"] = median([float(m["gc_collections"] or 0) for m in mine])
    row["gc_pause_max_ms"] = max(float(m["gc_pause_max_ms"] or 0.0) for m in mine)
    row["client_bound"] = f"{sum(m['client_bound'] for m in mine)}/{reps}"
    return row


def main(argv: list[str] | None = None) -> int:
    """Run the levels, print the table, write results/fidelity.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 repetition, 8 s runs, no client_bound search")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--run-time", type=float, default=12)
    ap.add_argument("--levels", default="", help="comma-separated stream counts (default 16,64,256)")
    ap.add_argument(
        "--gc", default="default", help="GC variants, interleaved: default,freeze,gen0:N,freeze+gen0:N"
    )
    a = ap.parse_args(argv)
    variants = [v.strip() for v in a.gc.split(",") if v.strip()]
    for v in variants:
        gc_env(v)  # bad input fails before any run
    reps, rt = (1, 8.0) if a.quick else (a.reps, a.run_time)
    levels = [int(x) for x in a.levels.split(",")] if a.levels else list(LEVELS)
    rows, runs = [], []
    bound_at: dict[int, bool] = {}
    for n in levels:
        per: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
        refs = []
        for _ in range(reps):
            for v in variants:
                o = ours(n, rt, v)
                per[v].append(o)
                print(
                    f"  {n} streams, gc {v}: ours TTFT {o['ttft_err_p50_ms']:+.2f}/{o['ttft_err_p99_ms']:+.2f} ms; "
                    f"client_bound {o['client_bound']}; gc {o['gc_collections']} collections, "
                    f"max pause {o['gc_pause_max_ms']} ms",
                    flush=True,
                )
            f = reference(n, rt)
            refs.append(f)
            print(
                f"  {n} streams: ref {f['ttft_err_p50_ms']:+.2f}/{f['ttft_err_p99_ms']:+.2f} ms", flush=True
            )
        mine = per[variants[0]]
        bound_at[n] = sum(m["client_bound"] for m in mine) * 2 > len(mine)
        for v in variants:
            rows.append(_row(n, v, per[v], refs))
            runs += [{k: x for k, x in m.items() if k not in ("ttft", "itl")} for m in per[v]]
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
        *(["gc", "gc_collections", "gc_pause_max_ms"] if variants != ["default"] else []),
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
