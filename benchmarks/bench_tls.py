"""HTTPS against plain HTTP through the same nginx: TTFT against the simulator's fixed ground truth, and tokens
per worker CPU-second.

The simulator (fixed mode: TTFT 50 ms, ITL 10 ms) runs pinned to core 0, one nginx (not pinned) with a TLS listener
(a certificate of a CA made for the run, `--ca-bundle`) and a plain one, both proxying unbuffered to the
simulator; `vllm-locust run --workers 1` runs on core 1. The two modes alternate run by run (interleaved), at
each concurrency. Per run: the TTFT error (p50, p99 of the result minus 50 ms), and the steady window's tokens
per worker CPU-second (common.Sampler: the simulator's token counter and the worker's utime+stime).
Goals: TLS within 0.5 ms of plain at the TTFT p50; TLS tokens per CPU-second >= 0.7x plain.

    python benchmarks/bench_tls.py [--quick] [--reps 3] [--users 16,64] [--seconds 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import ITL_MS, TTFT_MS, median, print_table, run_ours, start_sim, write_json

from tests.integration.gateways.nginx import NGINX, start_nginx
from tests.unit.client.tls_certs import make_certs

OUTPUT_LEN = 64


def one(host: str, sim_url: str, users: int, seconds: float, mode: str, extra: list[str]) -> dict[str, Any]:
    """One closed-loop run of `users` streams for about `seconds` through the gateway."""
    per_request_s = (TTFT_MS + (OUTPUT_LEN - 1) * ITL_MS) / 1000
    n = max(users * 2, int(users * seconds / per_request_s))
    r = run_ours(
        host,
        users=users,
        num_prompts=n,
        output_len=OUTPUT_LEN,
        tag=f"tls-{mode}-{users}",
        extra=["--spawn-rate", str(max(100, users)), *extra],
        stats_url=sim_url,
    )
    res, win = r["result"], r["window"] or {}
    return {
        "mode": mode,
        "users": users,
        "completed": res.get("completed"),
        "failed": res.get("failed"),
        "ttft_err_p50_ms": res["median_ttft_ms"] - TTFT_MS,
        "ttft_err_p99_ms": res["p99_ttft_ms"] - TTFT_MS,
        "itl_err_p50_ms": res["median_itl_ms"] - ITL_MS,
        "tok_s": win.get("tok_s"),
        "cpu_util": win.get("cpu_util"),
        "tok_per_cpu_s": win.get("tok_per_cpu_s"),
    }


def main() -> int:
    """Run the interleaved comparison; print the table and write benchmarks/results/bench_tls.json."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one rep at 64 users, 6 s runs")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--users", default="16,64")
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    if NGINX is None:
        print("bench_tls: nginx is not installed (apt-get install -y nginx)", file=sys.stderr)
        return 2
    reps, users_list, seconds = (
        (1, [64], 6.0) if a.quick else (a.reps, [int(x) for x in a.users.split(",")], a.seconds)
    )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        certs = make_certs(Path(tmp) / "certs")
        # nginx floats: pinned beside the simulator, the two starved each other (TLS bursts of 100 ms at 64 streams)
        with (
            start_sim() as sim,
            start_nginx(Path(tmp) / "nginx", sim.port, certs.server_cert, certs.server_key) as gw,
        ):
            modes = {"plain": (gw.http, []), "tls": (gw.https, ["--ca-bundle", str(certs.ca)])}
            for users in users_list:
                for rep in range(reps):
                    order = (
                        ("plain", "tls") if rep % 2 == 0 else ("tls", "plain")
                    )  # interleaved, order alternating
                    for mode in order:
                        host, extra = modes[mode]
                        row = one(host, sim.url, users, seconds, mode, extra)
                        row["rep"] = rep
                        rows.append(row)
                        print(
                            f"  {mode:5s} users={users} rep={rep}: ttft err p50 {row['ttft_err_p50_ms']:+.3f} ms, "
                            f"{row['tok_per_cpu_s']:.0f} tok/CPU-s",
                            flush=True,
                        )
    cols = [
        "mode",
        "users",
        "rep",
        "completed",
        "failed",
        "ttft_err_p50_ms",
        "ttft_err_p99_ms",
        "itl_err_p50_ms",
        "tok_s",
        "cpu_util",
        "tok_per_cpu_s",
    ]
    print_table(rows, cols, "runs (TTFT/ITL errors against the simulator's fixed 50 / 10 ms)")
    summary = []
    for users in users_list:
        by = {m: [r for r in rows if r["users"] == users and r["mode"] == m] for m in ("plain", "tls")}
        p50 = {m: median([r["ttft_err_p50_ms"] for r in by[m]]) for m in by}
        cap = {m: median([r["tok_per_cpu_s"] for r in by[m]]) for m in by}
        summary.append(
            {
                "users": users,
                "plain_ttft_err_p50_ms": p50["plain"],
                "tls_ttft_err_p50_ms": p50["tls"],
                "tls_minus_plain_p50_ms": p50["tls"] - p50["plain"],
                "plain_tok_per_cpu_s": cap["plain"],
                "tls_tok_per_cpu_s": cap["tls"],
                "tls_over_plain": cap["tls"] / cap["plain"],
            }
        )
    print_table(
        summary,
        list(summary[0]),
        "TLS vs plain (medians over reps; goals: |p50 diff| <= 0.5 ms, ratio >= 0.7)",
    )
    path = write_json(
        "bench_tls",
        {"reps": reps, "seconds": seconds, "output_len": OUTPUT_LEN, "runs": rows, "summary": summary},
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
