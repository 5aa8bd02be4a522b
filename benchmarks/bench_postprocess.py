"""Benchmark: N request records -> result JSON (post-processor) and -> HTML report; prints a table, writes JSON.

    python benchmarks/bench_postprocess.py --records 1000000 --tokens 128 --output bench_postprocess.json

Targets (issue 5): 1 M records -> result JSON <= 5 s; HTML report <= 20 s and <= 10 MB.
The records file is generated once per shape and cached under --workdir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from orchestration.report.cli import generate  # noqa: E402
from orchestration.report.postprocess import load_run, write_json_atomic  # noqa: E402


def make_run_dir(path: str, n: int, tokens: int, seed: int = 0) -> str:
    """Write a run directory of n synthetic records (JSONL as the master writes it) plus run_meta."""
    rec_path = os.path.join(path, "records.jsonl")
    if os.path.exists(rec_path):
        return path
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000.0
    conc = 256
    with open(rec_path + ".tmp", "w") as fh:
        block = 10_000
        for b0 in range(0, n, block):
            m = min(block, n - b0)
            ttft = rng.gamma(4.0, 10_000.0, m).astype(np.int64) + 1000
            gaps = rng.gamma(8.0, 1_250.0, (m, tokens - 1)).astype(np.int64) + 1
            chunks = np.concatenate([ttft[:, None], ttft[:, None] + np.cumsum(gaps, axis=1)], axis=1)
            starts = t0 + (b0 + np.arange(m)) / conc * (chunks[:, -1].mean() / 1e6)
            fails = rng.random(m) < 0.002
            lines = []
            for i in range(m):
                ok = not fails[i]
                c = chunks[i].tolist() if ok else []
                lines.append(json.dumps({
                    "scenario": "chat", "worker": f"w{i % 8}", "user": i % conc, "seq": b0 + i, "endpoint": "chat",
                    "t_start": float(starts[i]), "t_intended": None, "chunk_times_us": c,
                    "end_us": int(chunks[i][-1]) + 300, "prompt_tokens": 128 if ok else None,
                    "output_tokens": tokens if ok else None, "cached_tokens": None, "tokens_estimated": False,
                    "finish_reason": "length" if ok else None, "status": 200 if ok else 500,
                    "error": None if ok else "http", "error_detail": None, "input_len": 128, "output_len": tokens,
                    "turn": None, "valid": None,
                }, separators=(",", ":")))  # fmt: skip
            fh.write("\n".join(lines) + "\n")
    os.replace(rec_path + ".tmp", rec_path)
    with open(os.path.join(path, "run_meta.json"), "w") as fh:
        json.dump({"model_id": "bench", "endpoint": "chat", "users": conc, "num_prompts": n}, fh)
    return path


def main() -> int:
    """Run the benchmark; exit 1 when a target is missed."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--tokens", type=int, default=128, help="output tokens (= chunks) per request")
    p.add_argument("--workdir", default="/tmp/vllm-locust-bench")
    p.add_argument("--output", default="bench_postprocess.json")
    a = p.parse_args()
    run_dir = os.path.join(a.workdir, f"run-{a.records}x{a.tokens}")
    t = time.perf_counter()
    make_run_dir(run_dir, a.records, a.tokens)
    gen_s = time.perf_counter() - t
    size_mb = os.path.getsize(os.path.join(run_dir, "records.jsonl")) / 1e6

    t = time.perf_counter()
    run = load_run(run_dir)
    write_json_atomic(os.path.join(a.workdir, "result.json"), run.result)
    result_s = time.perf_counter() - t

    out_dir = os.path.join(a.workdir, f"report-{a.records}x{a.tokens}")
    t = time.perf_counter()
    code = generate([run_dir], out_dir, ["html"], quiet=True)
    html_s = time.perf_counter() - t
    html_mb = os.path.getsize(os.path.join(out_dir, "report.html")) / 1e6

    rows = [
        ("records", f"{a.records:,}", ""),
        ("chunks per record", str(a.tokens), ""),
        ("records.jsonl size", f"{size_mb:,.0f} MB", f"(generated in {gen_s:.1f} s, cached)"),
        ("records -> result JSON", f"{result_s:.2f} s", "target <= 5 s"),
        ("records -> HTML report", f"{html_s:.2f} s", "target <= 20 s"),
        ("HTML size", f"{html_mb:.2f} MB", "target <= 10 MB"),
        ("cores", str(os.cpu_count()), platform.processor() or platform.machine()),
    ]
    for name, value, note in rows:
        print(f"{name:<26}{value:>14}  {note}")
    ok = result_s <= 5 and html_s <= 20 and html_mb <= 10 and code == 0
    with open(a.output, "w") as fh:
        json.dump({"records": a.records, "tokens": a.tokens, "records_mb": size_mb, "result_s": result_s,
                   "html_s": html_s, "html_mb": html_mb, "cores": os.cpu_count(), "targets_met": ok}, fh, indent=1)  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
