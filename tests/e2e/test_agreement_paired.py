"""Agreement with `vllm bench serve` in one paired run: both tools load the same vLLM at the same time.

Back-to-back runs (test_agreement_vllm_bench.py) compare two different minutes of a server whose speed drifts
by ±8-14 % between runs on this machine (measured: 5 rounds of each tool, same load). That drift is larger
than the tolerance under test. Here both clients stream at once, each at concurrency 4 with the same lengths,
so their requests share every engine step: any difference between the two tools' figures over the window in
which both were sending is a difference of measurement, not of the server.

Prompts of 512 and outputs of 64 tokens, both ±50 % (see IN, OUT, RANGE). Compared over the common window (from the later tool's first request to the earlier tool's last one):
- completed requests: every request of both tools, none failed;
- output throughput: output tokens that arrived in the window / window length (chunk times: bench's start
  + TTFT + its ITLs, ours recorded; each chunk weighted by its request's tokens per chunk), within 5 %;
- median TTFT and median TPOT of the requests that started and ended in the window, within 10 %.
Figures go to benchmarks/results/agreement_paired.json (docs/agreement.md shows them).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from typing import Any

from tests.e2e.speed import scaled
from tests.e2e.test_agreement_vllm_bench import RESULTS, TOLERANCE, bench_argv, wait_bench
from tests.e2e.test_scenarios_real_vllm import assert_monotonic, run_vllm_locust
from tests.e2e.vllm_env import client_preexec, scrape_metrics

C_EACH = 4  # per tool: the server sees 8, as in the back-to-back test
# Median TTFT is the noisiest figure (it spreads over ~50-200 % of its median here): with 120 requests per tool
# the standard error of the two medians' difference was ~8 %, so ~500 per tool (~3 %). 512-token prompts keep
# TTFT at several engine steps, well above `vllm bench serve`'s own +2-4 ms TTFT overhead (bench_peers.py).
IN, OUT = 512, 64
# Random lengths (vLLM bench's range ratio, both tools): with fixed lengths and --ignore-eos, requests that start
# together end together, so each tool's requests arrive in groups whose prefills queue behind one another, and
# TTFT measures how each client happens to group its sends. Measured: median TTFT 90-126 ms then, the two tools
# 6-19 % apart in either direction; with RANGE 0.5 about 36 ms and within 4 %.
RANGE = 0.5
N_BENCH, N_OURS = 900, 500  # bench starts first (its startup is slower) and is still sending when ours ends


def _bench_requests(doc: dict[str, Any], perf_to_epoch: float) -> list[dict[str, Any]]:
    """Per request (epoch s): start, token arrival times, TTFT and TPOT, from --save-detailed."""
    out = []
    for st, ttft, itls, n in zip(doc["start_times"], doc["ttfts"], doc["itls"], doc["output_lens"], strict=True):
        if not ttft:
            continue
        t = st + perf_to_epoch + ttft
        times = [t]
        for gap in itls:
            t += gap
            times.append(t)
        tpot = (times[-1] - times[0]) / (n - 1) if n > 1 else None
        # bench times every chunk with choices, the first one being vLLM's role chunk (no token)
        chunks = times[1:] if len(times) > 1 else times
        out.append({"start": st + perf_to_epoch, "chunks": chunks, "n": n, "ttft": ttft, "tpot": tpot})
    return out


def _our_requests(records) -> list[dict[str, Any]]:
    out = []
    for r in records:
        if not r.ok or not r.chunk_times_us:
            continue
        times = [r.t_start + us / 1e6 for us in r.chunk_times_us]
        n = r.output_tokens or len(times)
        tpot = (times[-1] - times[0]) / (n - 1) if n > 1 else None
        out.append({"start": r.t_start, "chunks": times, "n": n, "ttft": times[0] - r.t_start, "tpot": tpot})
    return out


def _window_figures(reqs: list[dict[str, Any]], lo: float, hi: float) -> dict[str, Any]:
    """Output tokens per second that arrived in [lo, hi], and the medians of the requests wholly inside it.
    A chunk may carry several tokens when the server's front end falls behind (seen here: up to 17 fewer
    chunks than tokens), so each chunk counts for n / chunks tokens of its request (n from usage)."""
    arrived = sum(q["n"] / len(q["chunks"]) * sum(lo <= t <= hi for t in q["chunks"]) for q in reqs)
    inside = [q for q in reqs if q["start"] >= lo and q["chunks"][-1] <= hi]
    return {
        "output_throughput": arrived / (hi - lo),
        "median_ttft_ms": statistics.median(q["ttft"] for q in inside) * 1000,
        "median_tpot_ms": statistics.median(q["tpot"] for q in inside if q["tpot"] is not None) * 1000,
        "requests_in_window": len(inside),
    }


def test_paired_run_agrees_with_vllm_bench_serve(vllm_env, vllm_server_details, tmp_path):
    srv = vllm_server_details
    perf_to_epoch = time.time() - time.perf_counter()  # perf_counter is CLOCK_MONOTONIC: one clock per machine
    name = "bench-paired.json"
    argv = bench_argv(vllm_env, srv, tmp_path, name, n=N_BENCH, c=C_EACH, in_len=IN, out_len=OUT, seed=3001,
                      extra=("--random-range-ratio", str(RANGE), "--save-detailed"))  # fmt: skip
    bench = subprocess.Popen(argv, env=vllm_env.bench_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, preexec_fn=client_preexec())  # fmt: skip
    try:
        deadline = time.monotonic() + scaled(180)
        # start ours once bench is sending: most of both runs then overlap
        while scrape_metrics(srv.url, srv.model_name).get("vllm:num_requests_running", 0.0) < 1:
            assert bench.poll() is None, "vllm bench serve ended before sending"
            assert time.monotonic() < deadline, f"vllm bench serve sent nothing in {scaled(180):.0f} s"
            time.sleep(0.1)
        ours = run_vllm_locust(srv.url, tmp_path, "ours-paired", "--scenario", "chat", "--model", srv.model_name,
                               "--request-rate", "inf", "--max-concurrency", str(C_EACH), "--num-prompts", str(N_OURS),
                               "--input-len", str(IN), "--output-len", str(OUT), "--range-ratio", str(RANGE), "--ignore-eos", "--seed", "3002",
                               "--no-server-metrics", "--workers", "1")  # fmt: skip
    except BaseException:
        bench.kill()
        print((bench.communicate()[0] or "")[-4000:])
        raise
    out = wait_bench(bench, srv.url)
    assert bench.returncode == 0, out[-4000:]
    doc = json.loads((tmp_path / name).read_text())
    assert_monotonic(ours.records)
    assert doc["completed"] == N_BENCH and ours.result["completed"] == N_OURS
    assert doc["failed"] == 0 and ours.result["failed"] == 0
    b, o = _bench_requests(doc, perf_to_epoch), _our_requests(ours.records)
    lo = max(min(q["start"] for q in b), min(q["start"] for q in o))
    hi = min(max(q["chunks"][-1] for q in b), max(q["chunks"][-1] for q in o))
    assert hi - lo > 10, f"the two runs overlapped for {hi - lo:.1f} s only"
    fb, fo = _window_figures(b, lo, hi), _window_figures(o, lo, hi)
    rel = {k: fo[k] / fb[k] - 1 for k in TOLERANCE}
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "window_s": hi - lo, "concurrency_each": C_EACH,
              "input_len": IN, "output_len": OUT, "vllm_bench_serve": fb, "vllm_locust": fo,
              "relative_difference": rel, "tolerance": TOLERANCE,
              "input_tokens_per_request": {"vllm_bench_serve": doc["total_input_tokens"] / N_BENCH,
                                           "vllm_locust": ours.result["total_input_tokens"] / N_OURS}}  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "agreement_paired.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"\npaired window {hi - lo:.1f} s:")
    for k in (*TOLERANCE, "requests_in_window"):
        print(f"  {k:20s} vllm bench {fb[k]:10.2f}   vllm-locust {fo[k]:10.2f}")
    print("  relative (ours/bench - 1): " + ", ".join(f"{k} {v:+.1%}" for k, v in rel.items()))
    assert all(abs(rel[k]) <= tol for k, tol in TOLERANCE.items()), json.dumps(report, indent=1)
