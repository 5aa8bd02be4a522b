"""The server's counters around the load, computed on two snapshots: the prefix-cache warning of a random-prompt
run that hit the cache (the scrapes themselves: tests/unit/distributed/test_server_scrape.py)."""

from __future__ import annotations

from vllm_users.measure.server_counters import LoadCounters, prefix_cache_warning


def _hits(hits: float, queries: float) -> LoadCounters:
    return LoadCounters(
        "u",
        {"vllm:prefix_cache_hits_total": 100.0, "vllm:prefix_cache_queries_total": 1000.0},
        {"vllm:prefix_cache_hits_total": 100.0 + hits, "vllm:prefix_cache_queries_total": 1000.0 + queries},
    )


def test_a_random_prompt_run_that_hit_the_cache_is_warned() -> None:
    m = {"completed": 100, "total_input_tokens": 10_000}
    w = prefix_cache_warning(_hits(9_000, 10_000), m, ["chat"], False, 4)
    assert (
        w is not None
        and "PREFIX CACHE HITS" in w
        and "90%" in w
        and "--seed" in w
        and "--reset-prefix-cache" in w
    )
    assert prefix_cache_warning(_hits(0, 10_000), m, ["chat"], False, 4) is None  # fresh prompts
    # the chat template's tokens are shared by every prompt: 30 of 100 tokens per request are no resent prompt
    assert prefix_cache_warning(_hits(3_200, 10_000), m, ["chat"], False, 30) is None
    assert prefix_cache_warning(_hits(3_200, 10_000), m, ["chat"], False, None) is not None
    # hits are the point: history (multi-turn), schemas and tools, a dataset or shared prefixes, unknown users
    for scen in (["multi-turn"], ["chat", "json"], ["tools"], ["MyUser"], []):
        assert prefix_cache_warning(_hits(9_000, 10_000), m, scen, False, 4) is None
    assert prefix_cache_warning(_hits(9_000, 10_000), m, ["chat"], True, 4) is None
    # without the server's counters: usage's cached_tokens in the records
    rec = {**m, "prefix_cache_hit_rate": 0.8, "cached_tokens_reported": True}
    assert "usage's cached_tokens" in (prefix_cache_warning(None, rec, ["burst"], False, 4) or "")
    assert prefix_cache_warning(None, m, ["chat"], False, 4) is None  # nothing says
