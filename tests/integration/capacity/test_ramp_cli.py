"""`--ramp-up-strategy` through the real CLI: the send rate rises as planned, the result names the ramp."""

from __future__ import annotations

import numpy as np
import pytest

from tests.integration.core.helpers import cli
from vllm_users.workload.ramp import ramp_schedule


@pytest.mark.timeout(180)
def test_linear_ramp(tmp_path) -> None:
    r = cli(
        [
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps",
            "5",
            "--ramp-up-end-rps",
            "60",
            "--num-prompts",
            "120",
            "--workers",
            "2",
            "--output-len",
            "4",
            "--ignore-eos",
            "--seed",
            "3",
            "--sim-args",
            "--fixed --ttft-ms 5 --itl-ms 2",
        ],
        str(tmp_path),
    )
    assert r.rc == 0, r.logs()[-3000:]
    res = r.result
    assert (res["ramp_up_strategy"], res["ramp_up_start_rps"], res["ramp_up_end_rps"]) == (
        "linear",
        5.0,
        60.0,
    )
    assert res["request_rate"] == "inf" and res["arrivals"]["scheduled"] == 120
    recs = r.records()
    t0 = res["meta"]["started_at"] if "started_at" in res["meta"] else min(x["t_intended"] for x in recs)
    intended = np.sort([x["t_intended"] for x in recs])
    planned = ramp_schedule(120, "linear", 5, 60, 1.0, 3)
    # the intended times are the planned schedule shifted by the run's origin
    assert np.allclose(intended - intended[0], planned - planned[0], atol=1e-6), (
        t0,
        intended[:3],
        planned[:3],
    )
    # the offered rate rises (actual sends follow it unless the machine starves the client: arrivals.late)
    first, last = 29 / np.ptp(intended[:30]), 29 / np.ptp(intended[-30:])
    assert first < 20 and last > 30, (first, last)
    assert res["arrivals"]["sent"] == 120 and res["arrivals"]["dropped"] == 0


def test_ramp_needs_its_rates(tmp_path) -> None:
    r = cli(["--ramp-up-strategy", "linear", "--num-prompts", "10"], str(tmp_path))
    assert r.rc == 2 and "needs --ramp-up-start-rps and --ramp-up-end-rps" in r.err
    r = cli(
        [
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps",
            "1",
            "--ramp-up-end-rps",
            "2",
            "--request-rate",
            "3",
            "--num-prompts",
            "10",
        ],
        str(tmp_path),
    )
    assert r.rc == 2 and "leave out --request-rate" in r.err
