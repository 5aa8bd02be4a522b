"""The health sampler's loop-lag probe: a block is measured in full, and where Linux tells, the
lag is set against the time the loop's thread waited for a CPU (a busy machine rather than our code)."""

from __future__ import annotations

import os
import time

import gevent
import numpy as np
import pytest

from vllm_users.measure import health
from vllm_users.measure.health import HealthSampler, summarize


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.exclusive  # client timing at the floor: alone on the machine
def test_a_block_of_the_loop_is_measured_as_lag() -> None:
    hs = HealthSampler(lag_probe=0.02)
    hs.start(warmup_s=0)
    gevent.sleep(0.1)
    _busy(0.06)  # holds the loop: the probe that falls due meanwhile runs late
    gevent.sleep(0.1)
    hs.stop()
    s = hs.take()
    assert max(s["lag_ms"]) >= 40
    assert sorted(s["lag_ms"])[len(s["lag_ms"]) // 2] < 10  # the rest of the time, the loop was free


@pytest.mark.skipif(not os.path.exists(health.SCHEDSTAT), reason="no schedstat on this kernel")
def test_run_queue_wait_is_sampled_with_each_probe() -> None:
    hs = HealthSampler(lag_probe=0.01)
    hs.start(warmup_s=0)
    gevent.sleep(0.2)
    hs.stop()
    s = hs.take()
    assert len(s["runq_ms"]) == len(s["lag_ms"]) > 5 and min(s["runq_ms"]) >= 0


def test_summary_explains_lag_by_run_queue_wait() -> None:
    lag = [1.0, 20.0, 30.0, 2.0]
    runq = [0.5, 20.0, 0.0, 3.0]  # the 20 ms lag: the thread waited for a CPU; the 30 ms one: our code
    row = summarize({"w": {"cpu": [0.2], "lag_ms": lag, "runq_ms": runq}})["workers"]["w"]
    assert row["lag_runq_share"] == pytest.approx(20 / 50)
    assert row["runq_wait_p99_ms"] == pytest.approx(float(np.percentile(runq, 99)))
    quiet = summarize({"w": {"cpu": [0.2], "lag_ms": [1.0, 2.0], "runq_ms": [0.0, 0.0]}})["workers"]["w"]
    assert quiet["lag_runq_share"] is None  # no lag worth explaining
    assert "runq_wait_p99_ms" not in summarize({"w": {"cpu": [0.2], "lag_ms": [1.0]}})["workers"]["w"]
