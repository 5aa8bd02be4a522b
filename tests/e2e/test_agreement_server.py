"""Agreement with the server's own counters: output tokens and TTFT, from vLLM's /metrics.

Scrape /metrics before and after one `vllm-locust run`; nothing else talks to this server in between.
The run's preflight sends one (or, after a retry, a few) 2-token request(s) too: vLLM counts them, we do not.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.e2e.test_scenarios_real_vllm import run_vllm_locust
from tests.e2e.vllm_env import scrape_metrics

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
PREFLIGHT_MAX_TOKENS = 2  # orchestration/preflight.py asks for 2 tokens per attempt


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def test_tokens_and_ttft_agree_with_vllm_metrics(vllm_server_details, tmp_path):
    srv = vllm_server_details
    n, out_len, users = 48, 64, 4
    before = scrape_metrics(srv.url, srv.model_name)
    run = run_vllm_locust(srv.url, tmp_path, "agree", "--scenario", "chat", "--users", str(users),
                          "--num-prompts", str(n), "--input-len", "128", "--output-len", str(out_len),
                          "--ignore-eos", "--seed", "21", "--no-server-metrics")  # fmt: skip
    time.sleep(0.5)  # the last request's counters are updated right after its final chunk
    after = scrape_metrics(srv.url, srv.model_name)
    preflight = json.loads((run.run_dir / "preflight.json").read_text())
    attempts = len(preflight.get("stream_attempts") or [1])
    r = run.result

    # ---- output tokens ----
    ours = r["total_output_tokens"]
    assert (r["completed"], r["failed"]) == (n, 0), r.get("errors_by_kind")
    assert ours == sum(rec.output_tokens or 0 for rec in run.records) == n * out_len
    server_tokens = round(_delta(after, before, "vllm:generation_tokens_total"))
    server_requests = round(_delta(after, before, "vllm:request_success_total"))
    preflight_tokens = server_tokens - ours
    assert server_requests == n + attempts
    assert 0 <= preflight_tokens <= PREFLIGHT_MAX_TOKENS * attempts, (server_tokens, ours)

    # ---- TTFT: the server's histogram (sum/count delta) vs ours over the same requests (+ preflight) ----
    cnt = _delta(after, before, "vllm:time_to_first_token_seconds_count")
    tot = _delta(after, before, "vllm:time_to_first_token_seconds_sum")
    assert round(cnt) == n + attempts
    server_mean_ms = tot / cnt * 1000
    client_mean_ms = r["mean_ttft_ms"]
    # the preflight's TTFT is in the server's sum; take it out at the server's own mean (its share is 1/49)
    diff_ms = client_mean_ms - server_mean_ms
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load": {
            "scenario": "chat",
            "workers": 2,
            "users": users,
            "num_prompts": n,
            "input_len": 128,
            "output_len": out_len,
            "ignore_eos": True,
        },  # fmt: skip
        "output_tokens": {
            "vllm_locust": ours,
            "server_delta": server_tokens,
            "preflight": preflight_tokens,
            "server_requests_delta": server_requests,
            "preflight_requests": attempts,
        },  # fmt: skip
        "ttft_ms": {
            "client_mean": client_mean_ms,
            "client_median": r["median_ttft_ms"],
            "server_mean": server_mean_ms,
            "client_minus_server": diff_ms,
            "relative": diff_ms / server_mean_ms,
        },  # fmt: skip
        "exit_code": run.code,
        "client_bound": r.get("client_bound"),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "agreement_server.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"\noutput tokens: vllm-locust {ours}, vLLM generation_tokens_total delta {server_tokens} "
          f"(preflight {preflight_tokens} in {attempts} request(s))")  # fmt: skip
    print(f"TTFT mean: client {client_mean_ms:.2f} ms, server {server_mean_ms:.2f} ms, "
          f"client - server {diff_ms:+.2f} ms ({diff_ms / server_mean_ms:+.1%})")  # fmt: skip
    assert client_mean_ms >= server_mean_ms
    # small: the client's share (HTTP, SSE parsing, scheduling on a shared 2-core box) stays below
    # 25 ms or half the server's TTFT, whichever is larger
    assert diff_ms <= max(25.0, 0.5 * server_mean_ms), report
