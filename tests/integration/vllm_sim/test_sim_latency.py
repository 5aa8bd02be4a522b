"""Latency model: fixed mode is exact; batching shows prefix-cache, batch-size, queueing and KV effects.

Every test can fail: each compares two measured conditions or a measurement with the configured truth.
Tolerances are for a noisy 2-core machine (server and test client share it).
"""

from __future__ import annotations

import re
import statistics
from concurrent.futures import ThreadPoolExecutor

import pytest

from vllm_sim import probe
from vllm_sim.launch import SimProcess, start_simulator

pytestmark = pytest.mark.timeout(120)


def timed(url: str, body: dict) -> tuple[float, list[float], probe.ProbeResult]:
    """TTFT and per-event gaps (seconds) of one streamed chat request, measured on the raw socket."""
    r = probe.request(url, "/v1/chat/completions", {**body, "stream": True}, timeout=30)
    assert r.complete, r.error
    times = [t for t, ev in r.events if b'"content":"' in ev and b'"role"' not in ev]
    return times[0] - r.start, [b - a for a, b in zip(times, times[1:], strict=False)], r


def chat_body(words: int = 8, max_tokens: int = 16, prefix: str = "w") -> dict:
    text = " ".join(f"{prefix}{i}" for i in range(words))
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "ignore_eos": True}


def metric(sim: SimProcess, name: str) -> float:
    text = probe.request(sim.url, "/metrics").body.decode()
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def lower_quartile(xs: list[float]) -> float:
    """The 25th percentile: robust to delay the test client adds to some requests, not to a late server."""
    return statistics.quantiles(xs, n=4)[0]


@pytest.mark.exclusive  # the simulator's exact times within 4 ms: other jobs' load delays its loop (4.7 ms late once)
def test_fixed_mode_gives_exact_ttft_and_itl() -> None:
    with start_simulator(["--fixed", "--ttft-ms", "50", "--itl-ms", "10"]) as sim:

        def one(i: int) -> tuple[float, list[float]]:
            ttft, gaps, _ = timed(sim.url, chat_body(max_tokens=20, prefix=f"r{i}"))
            return ttft, gaps

        with ThreadPoolExecutor(8) as ex:
            results = list(ex.map(one, range(24)))
        ttfts = [t for t, _ in results]
        gaps = [g for _, gs in results for g in gs]
        # The client (8 Python threads on a shared box) can only add delay, and on a loaded CI machine it
        # added ~3 ms to most requests (median 52.85 ms). So: never early, and the lower quartile exact;
        # a simulator that is late for most requests still fails the quartile.
        assert min(ttfts) * 1000 > 49.9, min(ttfts)
        assert abs(lower_quartile(ttfts) * 1000 - 50) < 2.0, lower_quartile(ttfts)
        assert abs(statistics.median(gaps) * 1000 - 10) < 1.0, statistics.median(gaps)
        # absolute deadlines: the last token lands at ttft + 19·itl, errors do not accumulate
        e2e = [t + sum(gs) for t, gs in results]
        assert min(e2e) * 1000 > 239.9, min(e2e)
        assert abs(lower_quartile(e2e) * 1000 - 240) < 4.0, lower_quartile(e2e)
        stats = probe.request(sim.url, "/sim/stats").json()
        assert stats["lateness_s"]["p50"] <= 0.001


def test_fixed_mode_tokens_per_chunk_and_bursts() -> None:
    with start_simulator(
        ["--fixed", "--ttft-ms", "20", "--itl-ms", "10", "--tokens-per-chunk", "2", "--chunks-per-write", "3"]
    ) as sim:
        r = probe.request(
            sim.url,
            "/v1/completions",
            {
                "prompt": "a",
                "max_tokens": 12,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
        d = r.data()
        texts = [e["choices"][0]["text"] for e in d if e != "[DONE]" and e["choices"]]
        assert len(texts) == 6 and all(len(t.split()) == 2 for t in texts)
        assert d[-2]["usage"]["completion_tokens"] == 12
        arrivals = sorted({round(t, 4) for t, _ in r.events})
        assert len(arrivals) <= 3  # two bursts of three events (+ the [DONE] write)


def test_prefix_cache_hits_cut_ttft() -> None:
    body = chat_body(words=3000, max_tokens=4)
    with start_simulator([]) as sim:
        cold, _, _ = timed(sim.url, body)
        warm, _, r = timed(sim.url, body)
        assert cold > 0.12  # ~3000 tokens at 20k tok/s
        assert warm < cold * 0.4, (cold, warm)
        assert metric(sim, "vllm:prefix_cache_hits_total") >= 2900
    with start_simulator(["--no-enable-prefix-caching"]) as sim:
        cold2, _, _ = timed(sim.url, body)
        warm2, _, _ = timed(sim.url, body)
        assert warm2 > cold2 * 0.8, (cold2, warm2)
        assert metric(sim, "vllm:prefix_cache_hits_total") == 0


def test_cached_tokens_reported_when_enabled() -> None:
    body = {**chat_body(words=200, max_tokens=2), "stream": False}
    with start_simulator(["--enable-prompt-tokens-details"]) as sim:
        probe.request(sim.url, "/v1/chat/completions", body)
        u = probe.request(sim.url, "/v1/chat/completions", body).json()["usage"]
        assert u["prompt_tokens_details"]["cached_tokens"] >= 192


def test_tpot_grows_with_batch_size() -> None:
    args = ["--decode-step-ms", "5", "--decode-per-seq-ms", "0.5"]
    with start_simulator(args) as sim:
        _, gaps1, _ = timed(sim.url, chat_body(max_tokens=30))
        with ThreadPoolExecutor(32) as ex:
            res = list(ex.map(lambda i: timed(sim.url, chat_body(max_tokens=30, prefix=f"b{i}")), range(32)))
        gaps32 = [g for _, gs, _ in res for g in gs]
        t1, t32 = statistics.median(gaps1), statistics.median(gaps32)
        assert abs(t1 * 1000 - 5.5) < 1.5, t1
        assert t32 > t1 * 1.8, (t1, t32)  # ~21 ms at 32 running sequences


def test_queueing_appears_past_max_num_seqs() -> None:
    with start_simulator(
        ["--max-num-seqs", "4", "--decode-step-ms", "10", "--decode-per-seq-ms", "0"]
    ) as sim:
        with ThreadPoolExecutor(12) as ex:
            res = list(ex.map(lambda i: timed(sim.url, chat_body(max_tokens=15, prefix=f"q{i}")), range(12)))
        ttfts = sorted(t for t, _, _ in res)
        assert ttfts[3] < 0.1  # the first four are admitted at once
        assert ttfts[4] > 0.12  # the fifth waits for a whole request (~150 ms) to finish
        assert ttfts[-1] > 0.25
        assert metric(sim, "vllm:request_queue_time_seconds_sum") > 0.5


def test_kv_pressure_preempts_and_still_completes() -> None:
    with start_simulator(
        ["--kv-cache-tokens", "512", "--decode-step-ms", "1", "--decode-per-seq-ms", "0"]
    ) as sim:
        with ThreadPoolExecutor(4) as ex:
            res = list(
                ex.map(
                    lambda i: timed(sim.url, chat_body(words=40, max_tokens=150, prefix=f"k{i}")), range(4)
                )
            )
        assert all(len(gs) == 149 for _, gs, _ in res)
        assert metric(sim, "vllm:num_preemptions_total") > 0
        assert metric(sim, "vllm:kv_cache_usage_perc") == 0.0


def test_moe_expert_counters() -> None:
    with start_simulator(
        ["--fixed", "--ttft-ms", "1", "--itl-ms", "1", "--num-experts", "8", "--topk", "2"]
    ) as sim:
        for i in range(5):
            timed(sim.url, chat_body(max_tokens=40, prefix=f"m{i}"))
        text = probe.request(sim.url, "/metrics").body.decode()
        counts = {
            int(e): float(v)
            for e, v in re.findall(
                r'^vllm:moe_expert_tokens_total{engine="0",expert="(\d+)"[^}]*} (\S+)$', text, re.M
            )
        }
        assert sum(counts.values()) == 2 * 200
        assert counts[0] > counts[7]
