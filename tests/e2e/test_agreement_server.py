"""Agreement with the server's own counters: output tokens and TTFT, from vLLM's /metrics.

Scrape /metrics before and after one `vllm-locust run`; nothing else talks to this server in between.
The run's preflight sends one (or, after a retry, a few) 2-token request(s) too: vLLM counts them, we do not.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.e2e.speed import scaled
from tests.e2e.test_scenarios_real_vllm import run_vllm_locust
from tests.e2e.vllm_env import scrape_metrics

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
PREFLIGHT_MAX_TOKENS = 2  # orchestration/server/preflight.py asks for 2 tokens per attempt


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def _one_load(srv, tmp_path: Path, users: int, n: int, out_len: int, seed: int, workers: int) -> dict:
    before = scrape_metrics(srv.url, srv.model_name)
    run = run_vllm_locust(
        srv.url,
        tmp_path,
        f"agree-c{users}",
        "--workers",
        str(workers),
        "--scenario",
        "chat",
        "--users",
        str(users),
        "--spawn-rate",
        "1000",
        "--num-prompts",
        str(n),
        "--input-len",
        "128",
        "--output-len",
        str(out_len),
        "--ignore-eos",
        "--seed",
        str(seed),
        "--no-server-metrics",
    )
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
    assert server_requests == n + attempts
    assert 0 <= server_tokens - ours <= PREFLIGHT_MAX_TOKENS * attempts, (server_tokens, ours)

    # ---- TTFT: mean of the server's histogram (sum/count delta; the preflight's one sample is in it) ----
    cnt = _delta(after, before, "vllm:time_to_first_token_seconds_count")
    tot = _delta(after, before, "vllm:time_to_first_token_seconds_sum")
    assert round(cnt) == n + attempts
    server_mean_ms = tot / cnt * 1000
    client_mean_ms = r["mean_ttft_ms"]
    diff_ms = client_mean_ms - server_mean_ms
    print(
        f"\nusers {users}: output tokens vllm-locust {ours}, vLLM generation_tokens_total delta {server_tokens} "
        f"(preflight {server_tokens - ours} in {attempts} request(s)); TTFT mean client {client_mean_ms:.2f} ms, "
        f"server {server_mean_ms:.2f} ms, client - server {diff_ms:+.2f} ms"
    )
    return {
        "load": {
            "scenario": "chat",
            "workers": workers,
            "users": users,
            "num_prompts": n,
            "input_len": 128,
            "output_len": out_len,
            "ignore_eos": True,
        },
        "output_tokens": {
            "vllm_locust": ours,
            "server_delta": server_tokens,
            "preflight": server_tokens - ours,
            "server_requests_delta": server_requests,
            "preflight_requests": attempts,
        },
        "ttft_ms": {
            "client_mean": client_mean_ms,
            "client_median": r["median_ttft_ms"],
            "server_mean": server_mean_ms,
            "client_minus_server": diff_ms,
        },
        "exit_code": run.code,
        "client_bound": r.get("client_bound"),
    }


def raw_client_ttft_ms(srv, n: int, out_len: int) -> list[float]:
    """A minimal independent client: http.client, one request at a time, first content line of the stream."""
    import http.client
    import random

    rng = random.Random(23)
    out = []
    for _ in range(n):
        text = " ".join(rng.choice(("alpha", "beta", "gamma", "delta", "omega", "sigma")) for _ in range(110))
        body = {
            "model": srv.model_name,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": out_len,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        conn = http.client.HTTPConnection(srv.host, srv.port, timeout=scaled(60))
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = None
        while line := resp.readline():
            if (
                first is None
                and line.startswith(b"data: ")
                and b'"content":"' in line
                and b'"role"' not in line
            ):
                first = time.perf_counter() - t0
        conn.close()
        assert first is not None
        out.append(first * 1000)
    return out


def test_tokens_and_ttft_agree_with_vllm_metrics(vllm_server_details, tmp_path):
    """Concurrency 1 (one worker: with --users 1 --workers 2 the idle worker's share of --num-prompts is
    never sent and the run hangs) isolates the per-request overhead outside the server's TTFT; concurrency 4 adds the
    API server's own queueing: vLLM stamps arrival after parsing, chat template and tokenization, and
    its one event loop also writes every stream's chunks, so on 2 shared cores that gap grows."""
    loads = [
        _one_load(vllm_server_details, tmp_path, 1, 16, 64, 21, workers=1),
        _one_load(vllm_server_details, tmp_path, 4, 48, 64, 22, workers=2),
    ]
    raw = raw_client_ttft_ms(vllm_server_details, 16, 64)
    raw_mean = sum(raw) / len(raw)
    ours_c1 = loads[0]["ttft_ms"]["client_mean"]
    print(
        f"TTFT mean at concurrency 1: vllm-locust {ours_c1:.2f} ms, minimal http.client reader {raw_mean:.2f} ms"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loads": loads,
        "raw_client_c1_ttft_ms": {"mean": raw_mean, "values": raw},
    }
    (RESULTS / "agreement_server.json").write_text(json.dumps(report, indent=1) + "\n")
    for load in loads:
        assert load["ttft_ms"]["client_minus_server"] >= 0, load
    # vLLM stamps a request's arrival after HTTP parsing, chat template and tokenization, so its TTFT misses
    # the front end's time. On this shared box that time is bimodal (~10 ms or ~100-160 ms) for our client and
    # for a minimal http.client reader alike, and it drifts within seconds: the comparison with the minimal
    # client is reported (JSON above), not asserted, until it is measured interleaved.
    print(f"vllm-locust - minimal client (mean TTFT, c=1): {ours_c1 - raw_mean:+.2f} ms")
