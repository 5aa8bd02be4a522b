"""Against a server that is not the embedded simulator (a simulator process of our own, reached by --host), the
result's server_served comes from the server's /metrics: vllm:request_success_total's increase over
the load, which counts every request the engine finished, an in-stream error too, and neither a 500 refused before
the engine nor the preflight's. A random-prompt run that resends the previous run's prompts (same --seed) is warned
about its prefix-cache hits; --reset-prefix-cache in the preflight takes the warning away."""

from __future__ import annotations

import pytest

from tests.integration.core.helpers import cli
from vllm_sim.launch import start_simulator
from vllm_users import exit_codes

LOAD = ["--users", "4", "--workers", "1", "--output-len", "8", "--ignore-eos"]


@pytest.mark.timeout(240)
def test_server_served_from_the_servers_counter(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with start_simulator(
        [
            "--fixed",
            "--ttft-ms",
            "5",
            "--itl-ms",
            "2",
            "--seed",
            "3",
            "--fault-rate-inband-error",
            "0.2",
            "--fault-rate-500",
            "0.1",
        ]
    ) as sim:
        r = cli([*LOAD, "--num-prompts", "60", "--host", sim.url], str(tmp_path))
        assert r.rc == exit_codes.FAILURES, r.logs()[-3000:]
        res = r.result
        errors = res["errors_by_kind"]
        assert errors.get("inband_error") and errors.get("http"), errors  # both kinds of failure happened
        assert res["server_served"] == res["completed"] + errors["inband_error"]
        assert res["missing_vs_server"] == 0
        assert "Traceback" not in sim.stderr_text()


@pytest.mark.timeout(300)
def test_prefix_cache_hits_of_a_repeated_run_are_warned(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the batching engine caches prompt blocks (as vLLM); 256-token random prompts, the default --seed
    load = [*LOAD, "--num-prompts", "24", "--input-len", "256"]
    with start_simulator(["--ttft-ms", "1", "--itl-ms", "1"]) as sim:
        first = cli([*load, "--host", sim.url], str(tmp_path), name="first")
        again = cli([*load, "--host", sim.url], str(tmp_path), name="again")
        reset = cli([*load, "--host", sim.url, "--reset-prefix-cache"], str(tmp_path), name="reset")
    for r in (first, again, reset):
        assert r.rc == 0, r.logs()[-3000:]
        assert r.result["server_served"] == 24 and r.result["missing_vs_server"] == 0
    warned = [w for w in again.result.get("warnings", []) if w.startswith("PREFIX CACHE HITS")]
    assert warned and "--seed" in warned[0] and "--reset-prefix-cache" in warned[0]
    assert "WARNING: PREFIX CACHE HITS" in again.out  # the summary says it too
    for r in (first, reset):
        assert not any("PREFIX CACHE" in w for w in r.result.get("warnings", [])), r.result.get("warnings")
    assert "vllm-locust: prefix cache reset (POST /reset_prefix_cache)" in reset.out
