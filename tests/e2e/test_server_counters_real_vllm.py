"""Against real vLLM: the result's server_served is vLLM's own vllm:request_success_total
increase over the load (the preflight's requests not in it) and equals what we completed; --reset-prefix-cache on
a server without dev mode (VLLM_SERVER_DEV_MODE unset: POST /reset_prefix_cache is 404) is a one-line warning, the
run goes on; the same random prompts sent again (same --seed) hit vLLM's prefix cache, and the result says so."""

from __future__ import annotations

from tests.e2e.test_scenarios_real_vllm import run_vllm_locust

# a --seed no other test of the tier uses: the first run's prompts are new to this shared server
LOAD = (
    "--workers",
    "1",
    "--scenario",
    "chat",
    "--users",
    "2",
    "--num-prompts",
    "12",
    "--input-len",
    "128",
    "--output-len",
    "16",
    "--ignore-eos",
    "--seed",
    "20208",
)


def test_server_served_and_prefix_cache_warning_from_vllms_counters(vllm_server, tmp_path):
    first = run_vllm_locust(vllm_server.url, tmp_path, "counters-first", *LOAD, "--reset-prefix-cache")
    r = first.result
    assert (r["completed"], r["failed"]) == (12, 0), r.get("errors_by_kind")
    assert r["server_served"] == 12 and r["missing_vs_server"] == 0
    assert (
        "vllm-locust: warning: --reset-prefix-cache: POST /reset_prefix_cache returned HTTP 404"
        in first.stdout
    )
    assert not any(w.startswith("PREFIX CACHE HITS") for w in r.get("warnings", [])), r.get("warnings")

    again = run_vllm_locust(vllm_server.url, tmp_path, "counters-again", *LOAD)
    r = again.result
    assert r["server_served"] == 12 and r["missing_vs_server"] == 0
    warned = [w for w in r.get("warnings", []) if w.startswith("PREFIX CACHE HITS")]
    assert warned and "server's prefix-cache counters" in warned[0], r.get("warnings")
    print(f"\nsecond run: {warned[0]}")
