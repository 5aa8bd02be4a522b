"""Real vLLM on a GPU: ours against `vllm bench serve`, both grounded in vLLM's own histograms and counters.

`--tools raw` adds the floor client (floor_client.py: asyncio, no HTTP library, no JSON on the hot path), the
least any client adds: compare a client with the floor over the same window, not with the histogram alone.

Per concurrency, `--repeats` rounds in ABBA order (round 0: ours then vllm bench, round 1: vllm bench then ours,
...), each run with a fresh seed (so no run hits the prefix cache with an earlier run's prompts). Around every
run /metrics is read in full, so each run gets its own delta of the server's TTFT histogram (sum/count: its
exact mean), generation-token, success and prefix-cache counters. Per run: client mean/median TTFT, the
client-minus-server mean TTFT (what the client adds: send path, reading, scheduling), output tok/s, output
tokens counted by the client against the server's counter, and (ours) the workers' loop lag and CPU.

    python benchmarks/bench_gpu_vllm.py --host http://127.0.0.1:8000 --model rand --tokenizer /tmp/model \
        [--concurrency 16,256] [--repeats 2] [--requests-per-stream 6] [--workers 4] \
        [--bench-cmd "python3 -m vllm.entrypoints.cli.main bench serve"]

The device recipe (../shared/gpu/README.md) serves `rand` at 127.0.0.1:8000; run this there with
PYTHONPATH=/tmp/site:. from the carried tree. Never asserts; prints a table and writes
benchmarks/results/gpu_vllm.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from common import RESULTS, print_table, read_records, write_json

Snapshot = dict[tuple[str, str], float]
TTFT_HIST = "vllm:time_to_first_token_seconds"
# the engine's per-request TPOT (vLLM v1), then its older name: the server's own TPOT over each run
TPOT_HISTS = ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds")
COUNTERS = (
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:request_success_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
)


def scrape(host: str) -> Snapshot:
    """Every sample of /metrics: (name, le or '') -> value summed over the other labels."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(host + "/metrics", timeout=10).read().decode()
    out: Snapshot = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = (s.name, s.labels.get("le", "") if s.name.endswith("_bucket") else "")
            out[key] = out.get(key, 0.0) + float(s.value)
    return out


def server_delta(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """The server's view of one run: its mean TTFT (ms, exact from sum/count) and its counters' deltas."""
    d = {c: after.get((c, ""), 0.0) - before.get((c, ""), 0.0) for c in COUNTERS}
    n = after.get((TTFT_HIST + "_count", ""), 0.0) - before.get((TTFT_HIST + "_count", ""), 0.0)
    s = after.get((TTFT_HIST + "_sum", ""), 0.0) - before.get((TTFT_HIST + "_sum", ""), 0.0)
    d["server_ttft_count"] = n
    d["server_mean_ttft_ms"] = s / n * 1e3 if n else float("nan")
    d["server_mean_tpot_ms"] = float("nan")
    for h in TPOT_HISTS:
        n = after.get((h + "_count", ""), 0.0) - before.get((h + "_count", ""), 0.0)
        if n:
            d["server_mean_tpot_ms"] = (after[(h + "_sum", "")] - before.get((h + "_sum", ""), 0.0)) / n * 1e3
            break
    return d


def run_ours(a: argparse.Namespace, c: int, n: int, seed: int, out: Path, tree: str = "") -> dict[str, Any]:
    """One `vllm-locust run`, closed loop at c streams over n requests (vllm bench's --max-concurrency c);
    `tree`: another checkout of the project to run instead of this one (a before/after comparison)."""
    name = f"ours-c{c}-s{seed}"
    env = dict(os.environ)
    if tree:  # the tree first on the path; it runs in its own folder, so paths given relative to ours are made absolute
        tree = os.path.abspath(tree)
        env["PYTHONPATH"] = os.pathsep.join([tree, *filter(None, [env.get("PYTHONPATH", "")])])
    tokenizer = os.path.abspath(a.tokenizer) if os.path.exists(a.tokenizer) else a.tokenizer
    cmd = [
        sys.executable,
        "-m",
        "orchestration.cli",
        "run",
        "--host",
        a.host,
        "--model",
        a.model,
        "--tokenizer",
        tokenizer,
        *([] if "--request-rate" in a.ours_args else ["--users", str(c)]),
        "--num-prompts",
        str(n),
        "--workers",
        str(a.workers),
        "--input-len",
        str(a.input_len),
        "--output-len",
        str(a.output_len),
        "--ignore-eos",
        "--seed",
        str(seed),
        "--output-dir",
        str(out),
        "--run-name",
        name,
        "--no-report",
        "--quiet",
        "--stop-timeout",
        "60",
        *shlex.split(a.ours_args),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env, cwd=tree or None)
    path = out / name / "result.json"
    if not path.exists():
        raise RuntimeError(f"ours wrote no result (exit {p.returncode}): {p.stderr[-800:]}")
    res = json.loads(path.read_text())
    workers = (res.get("client_health") or {}).get("workers") or {}
    first, rest = first_wave(out / name, c)
    return {
        "exit": p.returncode,
        "completed": res["completed"],
        "failed": res["failed"],
        "mean_ttft_ms": res["mean_ttft_ms"],
        "median_ttft_ms": res["median_ttft_ms"],
        "p99_ttft_ms": res.get("p99_ttft_ms"),
        "mean_tpot_ms": res["mean_tpot_ms"],
        "output_tok_s": res["output_throughput"],
        "output_tokens": res["total_output_tokens"],
        "loop_lag_p99_ms": max((w.get("loop_lag_p99_ms", 0.0) for w in workers.values()), default=None),
        "loop_lag_max_ms": max((w.get("loop_lag_max_ms", 0.0) for w in workers.values()), default=None),
        "worker_cpu_max": max((w.get("cpu_mean", 0.0) for w in workers.values()), default=None),
        "client_cores": sum(w.get("cpu_mean") or 0.0 for w in workers.values()) or None,
        "client_bound": bool(res.get("client_bound")),
        "server_served": res.get("server_served"),
        "missing_vs_server": res.get("missing_vs_server"),
        "ttft_first_wave_ms": first,
        "ttft_after_first_wave_ms": rest,
    }


def first_wave(run_dir: Path, c: int) -> tuple[float | None, float | None]:
    """Mean client TTFT (ms) of the first `c` requests sent (a closed loop's first wave: every stream at once,
    which queues in the server's front end before its TTFT clock starts) and of the rest; None when absent."""
    from vllm_users.run_dir import has_records

    if not has_records(str(run_dir)):
        return None, None
    ttft = []
    for r in read_records(run_dir):
        if r.get("error") is None and r.get("chunk_times_us") and r.get("t_start") is not None:
            ttft.append((r["t_start"], r["chunk_times_us"][0] / 1000.0))
    ttft.sort()
    head, tail = [x for _, x in ttft[:c]], [x for _, x in ttft[c:]]
    return (statistics.fmean(head) if head else None), (statistics.fmean(tail) if tail else None)


def run_bench(a: argparse.Namespace, c: int, n: int, seed: int, out: Path) -> dict[str, Any]:
    """One `vllm bench serve` on the random dataset at c in flight, the same lengths."""
    name = f"bench-c{c}-s{seed}.json"
    cmd = [
        *shlex.split(a.bench_cmd),
        "--backend",
        "openai-chat",
        "--base-url",
        a.host,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        a.model,
        "--tokenizer",
        a.tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(a.input_len),
        "--random-output-len",
        str(a.output_len),
        "--num-prompts",
        str(n),
        "--request-rate",
        "inf",
        "--max-concurrency",
        str(c),
        "--ignore-eos",
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out),
        "--result-filename",
        name,
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    path = out / name
    if not path.exists():
        raise RuntimeError(f"vllm bench wrote no result (exit {p.returncode}): {p.stderr[-800:]}")
    res = json.loads(path.read_text())
    return {
        "exit": p.returncode,
        "completed": res["completed"],
        "failed": res.get("failed", 0),
        "mean_ttft_ms": res["mean_ttft_ms"],
        "median_ttft_ms": res["median_ttft_ms"],
        "p99_ttft_ms": res.get("p99_ttft_ms"),
        "mean_tpot_ms": res["mean_tpot_ms"],
        "output_tok_s": res["output_throughput"],
        "output_tokens": res["total_output_tokens"],
    }


def run_raw(a: argparse.Namespace, c: int, n: int, seed: int, out: Path) -> dict[str, Any]:
    """One run of the floor client (floor_client.py): the same closed loop and lengths, over as many
    processes as ours has workers."""
    path = out / f"raw-c{c}-s{seed}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("floor_client.py")),
        "--host",
        a.host,
        "--model",
        a.model,
        "--tokenizer",
        a.tokenizer,
        "--concurrency",
        str(c),
        "--num-prompts",
        str(n),
        "--procs",
        str(a.workers),
        "--input-len",
        str(a.input_len),
        "--output-len",
        str(a.output_len),
        "--seed",
        str(seed),
        "--out",
        str(path),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
    if not path.exists():
        raise RuntimeError(f"the floor client wrote no result (exit {p.returncode}): {p.stderr[-800:]}")
    return {"exit": p.returncode, **json.loads(path.read_text())["summary"]}


def one(a: argparse.Namespace, tool: str, c: int, seed: int, out: Path) -> dict[str, Any]:
    """One run of `tool` with the server's histograms and counters read around it."""
    n = c * a.requests_per_stream
    before = scrape(a.host)
    t0 = time.time()
    if tool == "bench":
        row = run_bench(a, c, n, seed, out)
    elif tool == "raw":
        row = run_raw(a, c, n, seed, out)
    else:  # "ours" or "ours:TREE"
        row = run_ours(a, c, n, seed, out, tool.partition(":")[2])
    wall = time.time() - t0
    sv = server_delta(before, scrape(a.host))
    cores = row.get("client_cores")
    row.update(
        cores_per_1k_tok_s=cores / row["output_tok_s"] * 1e3 if cores and row.get("output_tok_s") else None,
        tool=tool,
        concurrency=c,
        seed=seed,
        wall_s=wall,
        server_mean_ttft_ms=sv["server_mean_ttft_ms"],
        ttft_minus_server_ms=row["mean_ttft_ms"] - sv["server_mean_ttft_ms"],
        server_mean_tpot_ms=sv["server_mean_tpot_ms"],
        tpot_over_server=row["mean_tpot_ms"] / sv["server_mean_tpot_ms"],
        server_output_tokens=sv["vllm:generation_tokens_total"],
        server_success=sv["vllm:request_success_total"],
        token_diff=row["output_tokens"] - sv["vllm:generation_tokens_total"],
        prefix_hits=sv["vllm:prefix_cache_hits_total"],
    )
    return row


def main(argv: list[str] | None = None) -> int:
    """Every concurrency, ABBA rounds; print the table and the per-tool medians, write gpu_vllm.json."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="http://127.0.0.1:8000")
    p.add_argument("--model", default="rand")
    p.add_argument("--tokenizer", default="/tmp/model")
    p.add_argument("--concurrency", default="16,256")
    p.add_argument("--repeats", type=int, default=2, help="rounds per concurrency (ABBA: even = ours first)")
    p.add_argument("--requests-per-stream", type=int, default=6)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument(
        "--tools",
        default="ours,bench",
        help="comma list of ours, bench, raw (the floor client, floor_client.py) and ours:TREE (another "
        "checkout, e.g. the code before a fix)",
    )
    p.add_argument(
        "--seed", type=int, default=int(time.time()) % 100_000, help="first seed; each run adds one"
    )
    p.add_argument("--bench-cmd", default=f"{sys.executable} -m vllm.entrypoints.cli.main bench serve")
    p.add_argument("--timeout", type=float, default=400.0)
    p.add_argument(
        "--ours-args",
        default="",
        help="extra flags for every `vllm-locust run` (ours and ours:TREE), "
        "e.g. '--spawn-rate 64': the same staggered start for both trees",
    )
    p.add_argument("--name", default="gpu_vllm")
    a = p.parse_args(argv)
    out = Path(
        tempfile.mkdtemp(prefix="bench-gpu-", dir=str(RESULTS) if RESULTS.exists() else None)
    ).resolve()
    tools = a.tools.split(",")
    for (
        t
    ) in tools:  # a before/after tree that is not there fails here, in one line, not as every one of its runs
        tree = t.partition(":")[2]
        if t.startswith("ours:") and not os.path.isfile(os.path.join(tree, "orchestration", "cli.py")):
            p.error(f"--tools {t}: {tree!r} is not a checkout of the project (no orchestration/cli.py)")
    rows: list[dict[str, Any]] = []
    seed = a.seed
    for c in (int(x) for x in a.concurrency.split(",")):
        for r in range(a.repeats):
            for tool in tools if r % 2 == 0 else tools[::-1]:
                seed += 1
                try:
                    rows.append(one(a, tool, c, seed, out))
                except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                    print(f"bench_gpu_vllm: {tool} c={c} seed={seed}: {e}", file=sys.stderr)
                if rows:
                    print_table(rows[-1:], _COLS)
                # after every run, so a call cut short by its time limit keeps the runs it finished
                write_json(a.name, {"args": vars(a), "runs": rows, "partial": True})
    print_table(rows, _COLS, "every run (client minus server: mean TTFT)")
    summary = []
    for c in sorted({r["concurrency"] for r in rows}):
        for tool in tools:
            rs = [r for r in rows if r["tool"] == tool and r["concurrency"] == c]
            if rs:
                summary.append(
                    {
                        "tool": tool,
                        "concurrency": c,
                        "runs": len(rs),
                        **{
                            k: statistics.median(r[k] for r in rs)
                            for k in _MEDIANS
                            if rs[0].get(k) is not None
                        },
                    }
                )
    print_table(summary, ["tool", "concurrency", "runs", *_MEDIANS], "medians over the rounds")
    path = write_json(
        a.name, {"args": vars(a), "runs": rows, "summary": summary, "gpu": os.environ.get("GPU_NAME", "")}
    )
    print(f"wrote {path}")
    return 0


_COLS = [
    "tool",
    "concurrency",
    "seed",
    "completed",
    "mean_ttft_ms",
    "server_mean_ttft_ms",
    "ttft_minus_server_ms",
    "median_ttft_ms",
    "mean_tpot_ms",
    "server_mean_tpot_ms",
    "tpot_over_server",
    "output_tok_s",
    "token_diff",
    "prefix_hits",
    "loop_lag_p99_ms",
    "loop_lag_max_ms",
    "worker_cpu_max",
    "client_cores",
    "cores_per_1k_tok_s",
    "missing_vs_server",
    "ttft_first_wave_ms",
    "ttft_after_first_wave_ms",
]
_MEDIANS = [
    "mean_ttft_ms",
    "server_mean_ttft_ms",
    "ttft_minus_server_ms",
    "mean_tpot_ms",
    "server_mean_tpot_ms",
    "tpot_over_server",
    "output_tok_s",
    "token_diff",
    "loop_lag_p99_ms",
    "loop_lag_max_ms",
    "client_cores",
    "cores_per_1k_tok_s",
]

if __name__ == "__main__":
    sys.exit(main())
