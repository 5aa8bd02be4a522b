"""A real GPU server (llama.cpp's llama-server with --metrics): our tool at 1, 2, 4, 8 workers.

Per worker count: output tok/s, TTFT / TPOT p50 and p99, the output tokens we counted against the server's own
counter (Δ `llamacpp:tokens_predicted_total` over the run, /metrics), the workers' CPU and client_bound, and
whether the client or the server limits (a server limit: tok/s stops growing while the workers have CPU left).

    python benchmarks/bench_gpu_server.py --host http://127.0.0.1:8080 [--workers 1,2,4,8] [--users-per-worker 32]
"""

from __future__ import annotations

import argparse
import re
import sys
import urllib.request
from typing import Any

from common import NCPU, print_table, run_ours, write_json


def predicted_tokens(host: str) -> float:
    """llama-server's counter of generated tokens (Prometheus text of /metrics)."""
    text = urllib.request.urlopen(host + "/metrics", timeout=10).read().decode()
    m = re.search(r"^llamacpp:tokens_predicted_total\s+([0-9.e+]+)", text, re.M)
    if not m:
        raise RuntimeError(
            "no llamacpp:tokens_predicted_total in /metrics (start llama-server with --metrics)"
        )
    return float(m.group(1))


def one(host: str, n: int, users: int, seconds: float, output_len: int) -> dict[str, Any]:
    """One run of n workers with `users` streams each."""
    before = predicted_tokens(host)
    r = run_ours(
        host,
        users=n * users,
        run_time=seconds,
        workers=n,
        output_len=output_len,
        input_len=64,
        pin=f"0-{NCPU - 1}",
        tag=f"gpu-{n}",
        sampler=False,
        extra=["--stop-timeout", "30"],
    )
    after = predicted_tokens(host)
    res = r["result"]
    health = res.get("client_health", {}).get("workers", {})
    cpu = [w.get("cpu_mean", 0.0) for w in health.values()]
    return {
        "workers": n,
        "streams": n * users,
        "output_tok_s": res["output_throughput"],
        "completed": res["completed"],
        "failed": res["failed"],
        "ttft_p50_ms": res["median_ttft_ms"],
        "ttft_p99_ms": res["p99_ttft_ms"],
        "tpot_p50_ms": res["median_tpot_ms"],
        "tpot_p99_ms": res["p99_tpot_ms"],
        "our_output_tokens": res["total_output_tokens"],
        "server_tokens": after - before,
        "token_diff": res["total_output_tokens"] - (after - before),
        "chunk_token_ratio": res.get("chunk_token_ratio"),
        "worker_cpu_max": max(cpu) if cpu else float("nan"),
        "client_bound": bool(res.get("client_bound")),
        "run_dir": r["run_dir"],
    }


def main(argv: list[str] | None = None) -> int:
    """Each worker count once; print the table, write results/gpu_server.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", required=True)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--users-per-worker", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--label", default="llama-server (CUDA)")
    a = ap.parse_args(argv)
    rows = []
    for n in (int(x) for x in a.workers.split(",")):
        x = one(a.host, n, a.users_per_worker, a.seconds, a.output_len)
        rows.append(x)
        print(
            f"  {n} workers: {x['output_tok_s']:.0f} tok/s, ours {x['our_output_tokens']} vs server "
            f"{x['server_tokens']:.0f} tokens, worker CPU max {x['worker_cpu_max']:.0%}",
            flush=True,
        )
    base = rows[0]["output_tok_s"] if rows else float("nan")
    for x in rows:
        x["scaling"] = x["output_tok_s"] / base
    print_table(
        rows,
        [
            "workers",
            "streams",
            "output_tok_s",
            "scaling",
            "completed",
            "failed",
            "ttft_p50_ms",
            "ttft_p99_ms",
            "tpot_p50_ms",
            "tpot_p99_ms",
            "our_output_tokens",
            "server_tokens",
            "token_diff",
            "worker_cpu_max",
            "client_bound",
        ],
        f"{a.label}: our tool at N workers",
    )
    path = write_json("gpu_server", {"label": a.label, "users_per_worker": a.users_per_worker, "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
