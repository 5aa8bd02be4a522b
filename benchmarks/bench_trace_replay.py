"""Trace replay fidelity: a 1,000-request, 2-minute mooncake-style trace replayed at --time-scale 1 with 2 workers.

The trace (written here, seeded): Poisson arrivals over 120 s; each request extends one of 20 shared prefix chains
(1-6 blocks of 512 tokens, so hash ids repeat as in Mooncake's traces) with 0-2 blocks of its own, its last block
partial; 16 output tokens. `vllm-locust run --trace FILE --workers 2 --ignore-eos` against the embedded simulator
(its batching engine and prefix cache, defaults). From result.json's `replay` (docs/traces.md):
- lag p50/p99/max: send time less t0 + offset of every request (targets: p99 <= 5 ms);
- sent vs the trace's requests (target: every one);
- the trace's block reuse (an infinite cache's hit rate) vs the server's prefix-cache hit rate (target: within
  5 points).

    python benchmarks/bench_trace_replay.py [--requests 1000] [--seconds 120] [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import RESULTS, print_table, vllm_locust_cmd, write_json

CHAINS = 20
CHAIN_BLOCKS = (1, 6)
OWN_BLOCKS = (0, 2)
BLOCK = 512
OUTPUT = 16


def write_trace(path: Path, n: int, seconds: float, seed: int = 0) -> None:
    """A mooncake-style JSONL trace: timestamp (ms), input_length, output_length, hash_ids."""
    rng = random.Random(seed)
    # a Poisson process given its n arrivals in [0, seconds): n sorted uniform times
    times = sorted(rng.uniform(0.0, seconds) for _ in range(n))
    own, rows = 1_000_000, []
    for t in times:
        chain = rng.randrange(CHAINS)
        ids = [chain * 100 + k for k in range(rng.randint(*CHAIN_BLOCKS))]
        k = rng.randint(*OWN_BLOCKS)
        ids += list(range(own, own + k))
        own += k
        length = len(ids) * BLOCK - rng.randint(0, BLOCK - 1)
        rows.append(
            {
                "timestamp": round(t * 1000, 3),
                "input_length": length,
                "output_length": OUTPUT,
                "hash_ids": ids,
            }
        )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def replay(trace: Path, workers: int, tag: str) -> dict[str, Any]:
    """One `vllm-locust run --trace` against the embedded simulator; its result.json."""
    out = RESULTS / "runs"
    name = f"{tag}-{int(time.time())}"
    cmd = [
        *vllm_locust_cmd(),
        "run",
        "--trace",
        str(trace),
        "--workers",
        str(workers),
        "--ignore-eos",
        "--output-dir",
        str(out),
        "--run-name",
        name,
        "--no-report",
        "--quiet",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    res_path = out / name / "result.json"
    if not res_path.exists():
        raise RuntimeError(f"vllm-locust run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    res: dict[str, Any] = json.loads(res_path.read_text())
    res["_wall_s"], res["_rc"], res["_run_dir"] = time.perf_counter() - t0, proc.returncode, str(out / name)
    return res


def main(argv: list[str] | None = None) -> int:
    """Write the trace, replay it, print the table, write results/trace_replay.json."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="100 requests over 12 s")
    a = ap.parse_args(argv)
    n, secs = (100, 12.0) if a.quick else (a.requests, a.seconds)
    RESULTS.mkdir(parents=True, exist_ok=True)
    trace = RESULTS / f"trace_replay_{n}.jsonl"
    write_trace(trace, n, secs)
    res = replay(trace, a.workers, f"trace-{n}")
    rep = res["replay"]
    lag = rep["lag_ms"] or {}
    row = {
        "requests": rep["trace_requests"],
        "sent": rep["sent"],
        "dropped": rep["dropped"],
        "failed": res["failed"],
        "lag_p50_ms": lag.get("p50"),
        "lag_p99_ms": lag.get("p99"),
        "lag_max_ms": lag.get("max"),
        "block_reuse_pct": 100 * rep["expected_block_reuse"],
        "server_hit_pct": None
        if rep["server_prefix_hit_rate"] is None
        else 100 * rep["server_prefix_hit_rate"],
        "gap_points": rep["reuse_gap_points"],
        "client_bound": bool(res.get("client_bound")),
    }
    row["lag_ok"] = row["lag_p99_ms"] is not None and row["lag_p99_ms"] <= 5.0
    row["all_sent"] = bool(rep["all_sent"])
    row["reuse_ok"] = row["gap_points"] is not None and abs(row["gap_points"]) <= 5.0
    cols = [
        "requests",
        "sent",
        "dropped",
        "failed",
        "lag_p50_ms",
        "lag_p99_ms",
        "lag_max_ms",
        "block_reuse_pct",
        "server_hit_pct",
        "gap_points",
        "lag_ok",
        "all_sent",
        "reuse_ok",
        "client_bound",
    ]
    print_table(
        [row], cols, f"trace replay: {n} requests over {secs:g} s, --time-scale 1, {a.workers} workers"
    )
    path = write_json(
        "trace_replay",
        {
            "requests": n,
            "seconds": secs,
            "workers": a.workers,
            "row": row,
            "replay": rep,
            "run_dir": res["_run_dir"],
            "wall_s": res["_wall_s"],
            "exit_code": res["_rc"],
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
