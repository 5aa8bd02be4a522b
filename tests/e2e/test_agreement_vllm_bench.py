"""Agreement with `vllm bench serve` on the same load against the same real vLLM.

Load: random dataset, 128 prompt / 128 output tokens (--ignore-eos), 64 prompts, concurrency 8.

How the loads are matched: `vllm bench serve --request-rate inf --max-concurrency C` creates every request
at t0 and lets a semaphore of C through. Our open loop `--request-rate inf --max-concurrency C` is the same
thing: every arrival is scheduled at the common t0 and at most C are in flight. The closed loop
(`--users C`) is not: each worker owns a fixed share of --num-prompts and its users start when Locust
spawns them, so a worker that starts late (by ~1 s here) stretches the run's duration.

The box is shared and noisy: the tools run back to back, in both orders, each with its own seed (same
prompts twice would hit the prefix cache). Completed counts and output tokens must match in every run.

The issue's tolerances (throughput 5 %, median TTFT and TPOT 10 %) are asserted by the paired run
(test_agreement_paired.py: both tools at once, so the server's drift cancels). Here, back to back, the server's
own speed drifts between runs by more than that (measured with vLLM pinned to its own core: ±8-14 % between
5 runs of the same tool; 2x within one round in CI, beside other jobs), so they are asserted only when
`VLLM_LOCUST_STRICT_AGREEMENT=1` (a quiet machine with spare cores). Otherwise each client's throughput and TPOT
are read against vLLM's own view of its run (NORMALISED: the requests the server held by Little's law, the TPOT
over the server's mean), where the drift cancels, and the median over the rounds must be within NORMALISED_BOUND,
which catches a factor, a wrong definition and a client that does not keep its concurrency. Every figure, raw and
normalised, is recorded in benchmarks/results/agreement_vllm_bench.json.

TTFT is compared one-sided, grounded in vLLM's own TTFT histogram over each run (server_histograms.ttft_bracket):
ours may read under the peer (`vllm bench serve` adds its send delay: on a busy box we read 11 % under it, and
a two-sided bound failed the more accurate tool), but never under the server's own TTFT, and our overhead above
the server's may exceed the peer's overhead above its run's server figure by at most the tolerance times the
peer's TTFT. Each tool's overhead is against its own run's server figure, so the drift between runs cancels.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.e2e.server_histograms import Snapshot, delta, scrape_full, ttft_bracket, ttft_margins
from tests.e2e.speed import communicate_progressing
from tests.e2e.test_scenarios_real_vllm import assert_monotonic, run_vllm_locust
from tests.e2e.vllm_env import client_preexec

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
C, N, IN, OUT = 8, 64, 128, 128
FIELDS = (
    "completed",
    "failed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "output_throughput",
    "median_ttft_ms",
    "mean_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "mean_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
)
TOLERANCE = {"output_throughput": 0.05, "median_ttft_ms": 0.10, "median_tpot_ms": 0.10}
LOOSE_TTFT = (
    0.5  # ours' TTFT excess over the peer's, median over rounds, without VLLM_LOCUST_STRICT_AGREEMENT
)
STRICT = os.environ.get("VLLM_LOCUST_STRICT_AGREEMENT") == "1"
MAX_ROUNDS = 3
SERVER_COMPARED = ("mean_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "engine_steps", "mean_tokens_per_step")
CLIENT_VS_SERVER_TPOT = 0.15  # a client's mean TPOT against the server's own for the same run
TWO_SIDED = ("output_throughput", "median_tpot_ms")  # TTFT is one-sided (ttft_bracket)
# The loose check's figures, each a client's reading over the server's own for the same run, so the server's speed
# cancels: requests the server held on average by the client's throughput (Little's law: requests per second times
# the server's mean E2E latency; C when a client keeps its C in flight), and the client's median TPOT over the
# server's mean TPOT.
NORMALISED = {"output_throughput": "in_flight", "median_tpot_ms": "tpot_over_server"}
# their bound: measured within 3 % in each of 3 rounds whose raw throughput differed by up to 32 % (AMD EPYC,
# 2 cores); 20 % still lets a busy box starve a client for a while, and catches one that does not keep its C
NORMALISED_BOUND = 0.2
# Our mean TTFT under the server's own for the same run: the histogram took exactly our requests plus the
# preflight's (a tiny prompt: its short TTFT only lowers the server's mean), so 1 ms covers rounding alone.
SERVER_SLACK_MS = 1.0


def bench_argv(
    env,
    server,
    out_dir: Path,
    name: str,
    *,
    n: int,
    c: int,
    in_len: int,
    out_len: int,
    seed: int,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """`vllm bench serve` on the random dataset at `c` in flight, result saved as out_dir/name."""
    return env.bench_command() + [
        "--backend",
        "openai-chat",
        "--base-url",
        server.url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        server.model_name,
        "--tokenizer",
        str(env.model_dir),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(in_len),
        "--random-output-len",
        str(out_len),
        "--num-prompts",
        str(n),
        "--request-rate",
        "inf",
        "--max-concurrency",
        str(c),
        "--ignore-eos",
        "--temperature",
        "0",
        "--seed",
        str(seed),
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(out_dir),
        "--result-filename",
        name,
        *extra,
    ]


def server_view(before: dict, after: dict) -> dict[str, float]:
    """What vLLM's own /metrics saw of one run: its mean TTFT, TPOT and E2E latency (ms), its engine steps and
    their mean size, the prompt tokens per request, and the API server's CPU seconds."""
    d = delta(before, after)
    return {
        "mean_ttft_ms": d["time_to_first_token_seconds"]["mean"] * 1e3,
        # of the median the histogram knows only its bucket: the lower edge bounds it from below
        "median_ttft_low_ms": d["time_to_first_token_seconds"]["p50_bucket"][0] * 1e3,
        "mean_tpot_ms": d["request_time_per_output_token_seconds"]["mean"] * 1e3,
        "mean_e2el_ms": d["e2e_request_latency_seconds"]["mean"] * 1e3,
        "mean_queue_ms": d["request_queue_time_seconds"]["mean"] * 1e3,
        "engine_steps": d["iteration_tokens_total"]["count"],
        "mean_tokens_per_step": d["iteration_tokens_total"]["mean"],
        "mean_prompt_tokens": d["request_prompt_tokens"]["mean"],
        "api_server_cpu_s": d["process_cpu_seconds_total"],
    }


def settled(url: str, before: Snapshot, n: int, timeout: float = 10.0) -> Snapshot:
    """The first /metrics snapshot whose histograms hold at least `n` more finished requests than `before`: vLLM
    updates a request's histograms right after its final chunk, so a client's last requests may not be in yet."""
    deadline = time.monotonic() + timeout
    while True:
        after = scrape_full(url)
        done = delta(before, after).get("e2e_request_latency_seconds", {}).get("count", 0)
        if done >= n:
            return after
        assert time.monotonic() < deadline, (
            f"vLLM's histograms took {done:.0f} of {n} requests in {timeout} s"
        )
        time.sleep(0.05)


def run_bench(env, server, out_dir: Path, seed: int) -> dict[str, Any]:
    name = f"bench-{seed}.json"
    argv = bench_argv(env, server, out_dir, name, n=N, c=C, in_len=IN, out_len=OUT, seed=seed)
    proc = subprocess.Popen(
        argv,
        env=env.bench_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=client_preexec(),
    )
    out = wait_bench(proc, server.url)
    assert proc.returncode == 0, out[-4000:]
    return json.loads((out_dir / name).read_text())


def wait_bench(proc: subprocess.Popen, url: str) -> str:
    """Its output, once `vllm bench serve` has ended; killed if vLLM's counters stand still meanwhile."""
    try:
        return communicate_progressing(proc, url)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"vllm bench serve: vLLM made no progress for {e.timeout:.0f} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def run_ours(server, out_dir: Path, seed: int) -> dict[str, Any]:
    run = run_vllm_locust(
        server.url,
        out_dir,
        f"ours-{seed}",
        "--scenario",
        "chat",
        "--model",
        server.model_name,
        "--request-rate",
        "inf",
        "--max-concurrency",
        str(C),
        "--num-prompts",
        str(N),
        "--input-len",
        str(IN),
        "--output-len",
        str(OUT),
        "--ignore-eos",
        "--seed",
        str(seed),
        "--no-server-metrics",
        "--workers",
        "1",
    )
    assert_monotonic(run.records)
    return run.result


def ttft_figures(
    bench: dict[str, Any], ours: dict[str, Any], server_b: dict[str, float], server_o: dict[str, float]
) -> dict[str, tuple[tuple[float, float, float, float], float]]:
    """ttft_bracket's figures and slack for the mean (each tool against its own run's server mean) and the
    median (the server's median bucket's lower edge on both sides: the peer's side cancels, ours <= peer + tol)."""
    low = server_o["median_ttft_low_ms"]
    return {
        "mean": (
            (ours["mean_ttft_ms"], server_o["mean_ttft_ms"], bench["mean_ttft_ms"], server_b["mean_ttft_ms"]),
            SERVER_SLACK_MS,
        ),
        "median": ((ours["median_ttft_ms"], low, bench["median_ttft_ms"], low), 0.0),
    }


def normalised(result: dict[str, Any], server: dict[str, float]) -> dict[str, float]:
    """One client's NORMALISED figures for its run: its throughput and TPOT read against the server's own view."""
    return {
        "in_flight": result["output_throughput"] / OUT * server["mean_e2el_ms"] / 1e3,
        "tpot_over_server": result["median_tpot_ms"] / server["mean_tpot_ms"],
    }


def compare(
    bench: dict[str, Any], ours: dict[str, Any], server_b: dict[str, float], server_o: dict[str, float]
) -> dict[str, Any]:
    """Relative differences (ours/bench - 1), the TTFT margins (ttft_margins: under the server's own in ms,
    excess over the peer's overhead as a fraction) and whether the round is within TOLERANCE."""
    rel = {k: (ours[k] - bench[k]) / bench[k] for k in TOLERANCE}
    figs = ttft_figures(bench, ours, server_b, server_o)
    margins = {
        k: dict(zip(("under_server_ms", "excess"), ttft_margins(*a), strict=True))
        for k, (a, _) in figs.items()
    }
    tol = TOLERANCE["median_ttft_ms"]
    ttft_failed = [
        f"{k}: {m}" for k, (a, slack) in figs.items() for m in ttft_bracket(*a, tol=tol, slack=slack)
    ]
    ok = (
        bench["completed"] == ours["completed"]
        and all(abs(rel[k]) <= TOLERANCE[k] for k in TWO_SIDED)
        and not ttft_failed
    )
    nb, no = normalised(bench, server_b), normalised(ours, server_o)
    return {
        "relative_difference": rel,
        "normalised": {"vllm_bench_serve": nb, "vllm_locust": no},
        "normalised_difference": {k: no[k] / nb[k] - 1 for k in nb},
        "ttft_margins": margins,
        "ttft_failures": ttft_failed,
        "within_tolerance": ok,
    }


def test_same_load_agrees_with_vllm_bench_serve(vllm_env, vllm_server_details, tmp_path):
    """~2 min: rounds of 64 requests per tool against real vLLM, back to back in both orders, each with its own
    /metrics snapshots; fewer rounds would leave the median over rounds to one noisy round."""
    srv = vllm_server_details
    rounds: list[dict[str, Any]] = []
    for i in range(MAX_ROUNDS):
        seeds = {"bench": 1000 + 2 * i, "ours": 1001 + 2 * i}
        order = ("bench", "ours") if i % 2 == 0 else ("ours", "bench")  # alternate: drift favours neither
        seen: dict[str, tuple[dict[str, Any], dict[str, float]]] = {}
        for tool in order:
            before = scrape_full(srv.url)
            if tool == "bench":
                result = run_bench(vllm_env, srv, tmp_path, seeds[tool])
            else:
                result = run_ours(srv, tmp_path, seeds[tool])
            seen[tool] = (result, server_view(before, settled(srv.url, before, int(result["completed"]))))
        (bench, server_b), (ours, server_o) = seen["bench"], seen["ours"]
        row = {
            "order": ", ".join(order),
            "vllm_bench_serve": {k: bench.get(k) for k in FIELDS},
            "vllm_locust": {k: ours.get(k) for k in FIELDS},
            **compare(bench, ours, server_b, server_o),
            "server": {
                "vllm_bench_serve": server_b,
                "vllm_locust": server_o,
                "relative_difference": {k: server_o[k] / server_b[k] - 1 for k in SERVER_COMPARED},
            },
        }
        rounds.append(row)
        print(f"\nround {i + 1} ({row['order']}):")
        for k in FIELDS:
            print(f"  {k:22s} vllm bench {bench.get(k)!s:>22}   vllm-locust {ours.get(k)!s:>22}")
        print(
            "  relative (ours/bench - 1): "
            + ", ".join(f"{k} {v:+.1%}" for k, v in row["relative_difference"].items())
        )
        print(
            "  over the server's own for each run (ours/bench - 1): "
            + ", ".join(f"{k} {v:+.1%}" for k, v in row["normalised_difference"].items())
        )
        for k in server_b:
            print(f"  server's {k:22s} during bench {server_b[k]:12.2f}   during ours {server_o[k]:12.2f}")
        # each tool reads what the server itself saw of its run (the mean TPOT is exact in vLLM's histogram)
        for tool, res, sv in (("vllm bench serve", bench, server_b), ("vllm-locust", ours, server_o)):
            assert abs(res["mean_tpot_ms"] / sv["mean_tpot_ms"] - 1) <= CLIENT_VS_SERVER_TPOT, (tool, res, sv)
        # in every round, loose or strict: no client reads TTFT under the server's own for its run (physics;
        # the drift between runs does not enter). The upper side, against the peer, is drift-prone: below.
        print(
            "  TTFT margins: "
            + ", ".join(
                f"{k} under server {m['under_server_ms']:+.2f} ms, excess over peer {m['excess']:+.1%}"
                for k, m in row["ttft_margins"].items()
            )
        )
        slacks = {k: slack for k, (_, slack) in ttft_figures(bench, ours, server_b, server_o).items()}
        assert all(m["under_server_ms"] <= slacks[k] for k, m in row["ttft_margins"].items()), row
        assert bench["completed"] == ours["completed"] == N
        assert bench["total_output_tokens"] == ours["total_output_tokens"] == N * OUT
        if STRICT and i >= 1 and any(r["within_tolerance"] for r in rounds):
            break
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load": {
            "backend": "openai-chat",
            "dataset": "random",
            "input_len": IN,
            "output_len": OUT,
            "ignore_eos": True,
            "num_prompts": N,
            "max_concurrency": C,
            "request_rate": "inf",
            "vllm_locust_workers": 1,
        },
        "tolerance": TOLERANCE,
        "rounds": rounds,
        "passed_rounds": [i + 1 for i, r in enumerate(rounds) if r["within_tolerance"]],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "agreement_vllm_bench.json").write_text(json.dumps(report, indent=1) + "\n")
    median_rel = {k: statistics.median(r["relative_difference"][k] for r in rounds) for k in TOLERANCE}
    report["median_relative_difference"] = median_rel
    median_norm = {
        k: statistics.median(r["normalised_difference"][k] for r in rounds) for k in NORMALISED.values()
    }
    report["median_normalised_difference"] = median_norm
    median_excess = {
        k: statistics.median(r["ttft_margins"][k]["excess"] for r in rounds) for k in ("mean", "median")
    }
    report["median_ttft_excess"] = median_excess
    (RESULTS / "agreement_vllm_bench.json").write_text(json.dumps(report, indent=1) + "\n")
    print("median over rounds (ours/bench - 1):", {k: f"{v:+.1%}" for k, v in median_rel.items()})
    print("the same over the server's own:", {k: f"{v:+.1%}" for k, v in median_norm.items()})
    print(
        "median over rounds of the TTFT excess over the peer:",
        {k: f"{v:+.1%}" for k, v in median_excess.items()},
    )
    if STRICT:
        assert report["passed_rounds"], json.dumps(rounds, indent=1)
    else:
        # back to back the server's speed drifts between runs (2x within one CI round on a busy box), so the
        # bound is on each client's reading over the server's own for its run, where that drift cancels
        assert all(abs(v) <= NORMALISED_BOUND for v in median_norm.values()), json.dumps(rounds, indent=1)
        # TTFT one-sided (ttft_bracket): ours may read under the peer, never by LOOSE_TTFT over it
        assert all(v <= LOOSE_TTFT for v in median_excess.values()), json.dumps(rounds, indent=1)
