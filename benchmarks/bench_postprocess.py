"""Benchmark: N request records -> result JSON (post-processor) and -> HTML report; prints a table, writes JSON.

    python benchmarks/bench_postprocess.py --records 1000000 --tokens 128 --output bench_postprocess.json

Post-processing reads records.parquet (vllm_users.measure.records_store), which the master writes beside
records.jsonl. Targets, so a long run's report stays quick: 1 M records -> result JSON <= 5 s; HTML report
<= 20 s and <= 10 MB.
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

from orchestration.report.generate import generate  # noqa: E402
from orchestration.report.postprocess import load_run, write_json_atomic  # noqa: E402
from vllm_users.measure import columns  # noqa: E402
from vllm_users.measure.record import RequestRecord  # noqa: E402
from vllm_users.measure.records_arrow import batch_from_payload  # noqa: E402
from vllm_users.measure.records_store import RecordsWriter  # noqa: E402
from vllm_users.run_dir import PARQUET  # noqa: E402


def make_run_dir(path: str, n: int, tokens: int, seed: int = 0) -> str:
    """Write a run directory of n synthetic records as the master writes it (records.jsonl, and records.parquet
    through the master's writer, one batch per 10 000 records, packed from numpy like the workers' pack_records)
    plus run_meta."""
    rec_path = os.path.join(path, "records.jsonl")
    cols_path = os.path.join(path, PARQUET)
    if os.path.exists(rec_path) and os.path.exists(cols_path):
        return path
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000.0
    conc = 256
    jsonl_end = 0
    writer = RecordsWriter(path)
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
                lines.append(
                    json.dumps(
                        {
                            "scenario": "chat",
                            "worker": f"w{i % 8}",
                            "user": i % conc,
                            "seq": b0 + i,
                            "endpoint": "chat",
                            "t_start": float(starts[i]),
                            "t_intended": None,
                            "chunk_times_us": c,
                            "end_us": int(chunks[i][-1]) + 300,
                            "prompt_tokens": 128 if ok else None,
                            "output_tokens": tokens if ok else None,
                            "cached_tokens": None,
                            "tokens_estimated": False,
                            "finish_reason": "length" if ok else None,
                            "status": 200 if ok else 500,
                            "error": None if ok else "http",
                            "error_detail": None,
                            "input_len": 128,
                            "output_len": tokens,
                            "turn": None,
                            "valid": None,
                        },
                        separators=(",", ":"),
                    )
                )
            text = "\n".join(lines) + "\n"
            fh.write(text)
            jsonl_end += len(text)
            writer.write(
                batch_from_payload(_pack_block(b0, m, conc, starts, chunks, fails, tokens)), jsonl_end
            )
    writer.close()
    os.replace(rec_path + ".tmp", rec_path)
    with open(os.path.join(path, "run_meta.json"), "w") as fh:
        json.dump({"model_id": "bench", "endpoint": "chat", "users": conc, "num_prompts": n}, fh)
    return path


def _pack_block(
    b0: int, m: int, conc: int, starts: np.ndarray, chunks: np.ndarray, fails: np.ndarray, tokens: int
) -> bytes:
    """The columns payload of one block: what pack_records makes of the same records (checked by the tests)."""
    i = np.arange(m)
    ok = ~fails
    neg = np.full(m, -1, np.int64)
    arrays = {
        "t_start": starts.astype(np.float64),
        "t_intended": np.full(m, np.nan),
        "end_us": chunks[:, -1].astype(np.int64) + 300,
        "prompt_tokens": np.where(ok, 128, -1),
        "output_tokens": np.where(ok, tokens, -1),
        "cached_tokens": neg,
        "input_len": np.full(m, 128),
        "output_len": np.full(m, tokens),
        "seq": b0 + i,
        "user": (i % conc).astype(np.int32),
        "turn": neg.astype(np.int32),
        "status": np.where(ok, 200, 500).astype(np.int32),
        "tokens_estimated": np.zeros(m, bool),
        "valid": np.full(m, -1, np.int8),
        "scenario": np.zeros(m, np.int32),
        "worker": (i % 8).astype(np.int32),
        "endpoint": np.zeros(m, np.int32),
        "finish_reason": np.where(ok, 0, 1).astype(np.int32),
        "error": np.where(ok, 0, 1).astype(np.int32),
        "chunk_lens": np.where(ok, tokens, 0).astype(np.int32),
        "chunks": chunks[ok].ravel().astype(np.int32),
    }
    tables = {
        "scenario": ["chat"],
        "worker": [f"w{k}" for k in range(8)],
        "endpoint": ["chat"],
        "finish_reason": ["length", None],
        "error": [None, "http"],
    }
    return columns._pack(m, {k: np.asarray(v) for k, v in arrays.items()}, tables)  # type: ignore[arg-type]


def pack_cost_us(tokens: int, n: int = 2000) -> float:
    """Worker CPU per record of pack_records (columns for a batch), median of 5, in µs."""
    recs = [
        RequestRecord(
            "chat",
            "w0",
            i,
            i,
            "chat",
            1.7e9 + i,
            chunk_times_us=list(range(20_000, 20_000 + tokens * 9000, 9000)),
            end_us=tokens * 9000 + 20_300,
            prompt_tokens=128,
            output_tokens=tokens,
            finish_reason="length",
            status=200,
            input_len=128,
            output_len=tokens,
        )
        for i in range(n)
    ]
    times = []
    for _ in range(5):
        t = time.perf_counter()
        columns.pack_records(recs)
        times.append(time.perf_counter() - t)
    return float(np.median(times)) / n * 1e6


def main() -> int:
    """Run the benchmark; exit 1 when a target is missed."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--tokens", type=int, default=128, help="output tokens (= chunks) per request")
    p.add_argument("--workdir", default="/tmp/vllm-locust-bench")
    p.add_argument("--output", default="bench_postprocess.json")
    p.add_argument("--repeat", type=int, default=3, help="timed runs of each path; the median is reported")
    a = p.parse_args()
    run_dir = os.path.join(a.workdir, f"run-{a.records}x{a.tokens}")
    t = time.perf_counter()
    make_run_dir(run_dir, a.records, a.tokens)
    gen_s = time.perf_counter() - t
    size_mb = os.path.getsize(os.path.join(run_dir, "records.jsonl")) / 1e6

    cols_mb = os.path.getsize(os.path.join(run_dir, PARQUET)) / 1e6

    out_dir = os.path.join(a.workdir, f"report-{a.records}x{a.tokens}")
    result_runs, html_runs, code = [], [], 0
    for _ in range(a.repeat):
        t = time.perf_counter()
        run = load_run(run_dir)
        write_json_atomic(os.path.join(a.workdir, "result.json"), run.result)
        result_runs.append(time.perf_counter() - t)
        del run
        t = time.perf_counter()
        code = max(code, generate([run_dir], out_dir, ["html"], quiet=True))
        html_runs.append(time.perf_counter() - t)
    result_s, html_s = float(np.median(result_runs)), float(np.median(html_runs))
    html_mb = os.path.getsize(os.path.join(out_dir, "report.html")) / 1e6
    pack_us = pack_cost_us(a.tokens)

    rows = [
        ("records", f"{a.records:,}", ""),
        ("chunks per record", str(a.tokens), ""),
        ("records.jsonl size", f"{size_mb:,.0f} MB", f"(generated in {gen_s:.1f} s, cached)"),
        ("records.parquet size", f"{cols_mb:,.0f} MB", "what post-processing reads"),
        (
            "records -> result JSON",
            f"{result_s:.2f} s",
            f"target <= 5 s; median of {a.repeat}: " + " ".join(f"{x:.2f}" for x in result_runs),
        ),
        (
            "records -> HTML report",
            f"{html_s:.2f} s",
            f"target <= 20 s; median of {a.repeat}: " + " ".join(f"{x:.2f}" for x in html_runs),
        ),
        ("worker pack per record", f"{pack_us:.1f} us", f"pack_records, {a.tokens} chunks"),
        ("HTML size", f"{html_mb:.2f} MB", "target <= 10 MB"),
        ("cores", str(os.cpu_count()), platform.processor() or platform.machine()),
    ]
    for name, value, note in rows:
        print(f"{name:<26}{value:>14}  {note}")
    ok = result_s <= 5 and html_s <= 20 and html_mb <= 10 and code == 0
    with open(a.output, "w") as fh:
        json.dump(
            {
                "records": a.records,
                "tokens": a.tokens,
                "records_mb": size_mb,
                "cols_mb": cols_mb,
                "result_s": result_s,
                "html_s": html_s,
                "result_runs_s": result_runs,
                "html_runs_s": html_runs,
                "pack_us_per_record": pack_us,
                "html_mb": html_mb,
                "cores": os.cpu_count(),
                "targets_met": ok,
            },
            fh,
            indent=1,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
