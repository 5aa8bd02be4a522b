"""Multi-turn prefix reuse, prefix caching on versus off, and bursts against the simulator."""

from __future__ import annotations

from .runner import succeeded, vllm_locust

DETAILS = "--sim-args=--enable-prompt-tokens-details"


def test_multiturn_cached_tokens_grow_and_hit_rate_follows_cache_rate(tmp_path) -> None:
    prefix, cache_rate = 512, 0.5
    r = vllm_locust(
        tmp_path,
        "--scenario",
        "multi-turn",
        "--num-turns",
        "4",
        "--prefix-len",
        str(prefix),
        "--cache-rate",
        str(cache_rate),
        "--num-prefixes",
        "2",
        "--input-len",
        "32",
        "--output-len",
        "16",
        "--num-prompts",
        "96",
        "--users",
        "4",
        DETAILS,
    )
    assert succeeded(r), r.err
    res = r.result
    turns = res["ttft_by_turn"]
    assert set(turns) == {"0", "1", "2", "3"}
    recs = [x for x in r.records() if x["error"] is None]
    mean_cached = {
        t: sum(x["cached_tokens"] for x in recs if x["turn"] == t)
        / max(1, sum(1 for x in recs if x["turn"] == t))
        for t in range(4)
    }
    assert mean_cached[0] < mean_cached[1] < mean_cached[2] < mean_cached[3]
    # turn 0: only conversations that start with a shared prefix can hit, on (about) the prefix's tokens
    shared = [x for x in recs if x["turn"] == 0 and x["extra"]["shared_prefix"]]
    unique = [x for x in recs if x["turn"] == 0 and not x["extra"]["shared_prefix"]]
    assert unique and all(x["cached_tokens"] == 0 for x in unique)
    realized = len(shared) / (len(shared) + len(unique))
    assert abs(realized - cache_rate) < 0.1
    hits = [x for x in shared if x["cached_tokens"] > 0]
    misses = [
        (x["extra"]["conversation"], x["t_start"], x["cached_tokens"])
        for x in shared
        if not x["cached_tokens"]
    ]
    assert len(hits) >= len(shared) - 2 - 4, (
        misses
    )  # misses: first use of each of 2 prefixes, concurrent starts
    assert all(prefix - 16 <= x["cached_tokens"] <= prefix + 16 for x in hits)
    implied = realized * prefix / turns["0"]["mean_prompt_tokens"]
    assert 0.5 * implied <= turns["0"]["cached_fraction"] <= 1.1 * implied
    # later turns reuse the whole previous conversation
    assert (
        turns["3"]["cached_fraction"] > 0.75 and res["prefix_cache_hit_rate"] > turns["0"]["cached_fraction"]
    )


def test_ttft_drops_with_prefix_caching(tmp_path) -> None:
    common = [
        "--scenario",
        "chat",
        "--prefix-len",
        "3000",
        "--cache-rate",
        "1",
        "--num-prefixes",
        "1",
        "--input-len",
        "16",
        "--output-len",
        "4",
        "--num-prompts",
        "24",
        "--users",
        "2",
    ]
    on = vllm_locust(
        tmp_path, *common, "--sim-args=--enable-prompt-tokens-details --prefill-tokens-per-s 10000", name="on"
    )
    off = vllm_locust(
        tmp_path,
        *common,
        "--sim-args=--enable-prompt-tokens-details --prefill-tokens-per-s 10000 --no-enable-prefix-caching",
        name="off",
    )
    assert succeeded(on) and succeeded(off), on.err + off.err
    ron, roff = on.result, off.result
    assert ron["prefix_cache_hit_rate"] > 0.8 and roff["prefix_cache_hit_rate"] == 0.0
    # 3000 uncached prompt tokens at 10k tok/s is ~300 ms of prefill per request; cached, a few ms
    assert roff["median_ttft_ms"] > 2 * ron["median_ttft_ms"] and roff["median_ttft_ms"] > 150


def test_burst_raises_ttft_p99_over_steady(tmp_path) -> None:
    sim = "--sim-args=--max-num-seqs 2"
    steady = vllm_locust(
        tmp_path,
        "--scenario",
        "chat",
        "--users",
        "2",
        "--run-time",
        "8s",
        "--input-len",
        "32",
        "--output-len",
        "16",
        sim,
        name="steady",
    )
    burst = vllm_locust(
        tmp_path,
        "--scenario",
        "burst",
        "--users",
        "24",
        "--burst-quiet-users",
        "2",
        "--burst-quiet",
        "2",
        "--burst-spike",
        "4",
        "--burst-recover",
        "2",
        "--input-len",
        "32",
        "--output-len",
        "16",
        sim,
        name="burst",
    )
    assert succeeded(steady) and burst.rc in (0, 1, 5), burst.err
    rs, rb = steady.result, burst.result
    assert "burst" in rb["per_scenario"] and rb["max_concurrent_requests"] > 2 * rs["max_concurrent_requests"]
    # 24 users on 2 sequence slots: requests queue in the server, so the tail of TTFT grows
    assert rb["p99_ttft_ms"] > 3 * rs["p99_ttft_ms"]
    assert rb["duration"] < 20  # the shape ended the run (no --num-prompts budget)


def _cv(xs: list[float]) -> float:
    mean = sum(xs) / len(xs)
    return (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5 / mean


def test_open_loop_burstiness_half_has_higher_interarrival_cv(tmp_path) -> None:
    cvs = {}
    for b in ("0.5", "4"):
        r = vllm_locust(
            tmp_path,
            "--request-rate",
            "40",
            "--burstiness",
            b,
            "--num-prompts",
            "80",
            "--seed",
            "3",
            "--input-len",
            "16",
            "--output-len",
            "4",
            "--max-concurrency",
            "32",
            name=f"b{b}",
        )
        assert r.rc in (0, 5), r.err
        t = sorted(x["t_intended"] for x in r.records())
        cvs[b] = _cv([t[i + 1] - t[i] for i in range(len(t) - 1)])
    # gamma shape k: CV = 1/sqrt(k) -> about 1.41 versus 0.5 (seeded, so the same schedule every time)
    assert cvs["0.5"] > 1.0 > 0.75 > cvs["4"]
