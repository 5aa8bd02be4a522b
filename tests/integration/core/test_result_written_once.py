"""The master builds the one result and writes it once: the simulator cross-check, --profile's block and
--gpu-hour-price's cost are in it, and `vllm-locust run` never rewrites result.json after the master wrote it."""

from __future__ import annotations

import json
import os

import pytest

from orchestration.launch.launcher import RESULT_LINE_PREFIX
from tests.integration.core.helpers import cli


@pytest.mark.timeout(180)
def test_result_built_once_by_the_master(tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = cli(
        [
            "--num-prompts",
            "20",
            "--workers",
            "1",
            "--users",
            "4",
            "--output-len",
            "8",
            "--ignore-eos",
            "--gpu-hour-price",
            "3.6",
            "--gpus",
            "2",
            "--profile",
            "--print-result",
            "--sim-args",
            "--fixed --ttft-ms 5 --itl-ms 2",
        ],
        str(tmp_path),
    )
    assert r.rc == 0, r.logs()[-3000:]
    path = os.path.join(r.run_dir, "result.json")
    text = open(path).read()
    res = json.loads(text)
    assert res["completed"] == 20 and res["exit_code"] == 0
    assert res["server_served"] == 20 + r.preflight_requests() and res["missing_vs_server"] == 0
    # $3.6/h x 2 GPUs = $0.002/s
    c = res["cost"]["at_measured_rate"]
    steady = res.get("delivery") or res  # the steady interior's rates (docs/capacity.md, "Cost")
    rate = steady.get("achieved_rate", res["request_throughput"])
    assert c["usd_per_request"] == pytest.approx(0.002 / rate)
    assert c["usd_per_million_output_tokens"] == pytest.approx(0.002 / steady["output_throughput"] * 1e6)
    # the simulator has no profiler: the run goes on and the block says why (also in RUN/profile.json)
    assert res["profile"]["requested"] and not res["profile"]["profiled"] and "404" in res["profile"]["error"]
    assert json.load(open(os.path.join(r.run_dir, "profile.json"))) == res["profile"]
    tail = ["server_served", "missing_vs_server", "profile", "cost", "latency_breakdown"]
    assert list(res)[-5:] == tail  # the server's view of the run last, where a TTFT goes at the very end
    # written once, by the master: exit_code.json comes right after it, and nothing touched result.json later
    assert os.stat(path).st_mtime_ns <= os.stat(os.path.join(r.run_dir, "exit_code.json")).st_mtime_ns
    printed = next(x for x in r.out.splitlines() if x.startswith(RESULT_LINE_PREFIX))
    assert json.loads(printed[len(RESULT_LINE_PREFIX) :]) == res
    assert "server profile: HTTP 404" in r.out
