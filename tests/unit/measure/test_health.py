"""The client-health thresholds: one value in code, the same in README.md and docs/metrics.md."""

from __future__ import annotations

import os
import re

from vllm_users.measure.client_verdict import CPU_BOUND_FRACTION, LOOP_LAG_P99_MS, RUNQ_SHARE_BUSY
from vllm_users.measure.health import summarize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_docs_state_the_code_thresholds() -> None:
    for doc in ("README.md", os.path.join("docs", "metrics.md")):
        text = open(os.path.join(ROOT, doc)).read()
        lag = re.findall(r"loop[ -]lag p99 (?:>|exceeds) (\d+(?:\.\d+)?) ms", text)
        cpu = re.findall(r"CPU (?:>|exceeds) (\d+) % of a core", text)
        assert lag and all(float(x) == LOOP_LAG_P99_MS for x in lag), (doc, lag)
        assert cpu and all(float(x) / 100 == CPU_BOUND_FRACTION for x in cpu), (doc, cpu)
        share = re.findall(r"(\d+) % of that lag was waiting for a CPU", text)
        assert share and all(float(x) / 100 == RUNQ_SHARE_BUSY for x in share), (doc, share)


def test_loop_lag_threshold_decides_client_bound() -> None:
    """Lag over the threshold that the run queue does not explain is our code's: client-bound."""
    just_over = [LOOP_LAG_P99_MS + 0.5] * 100
    under = [LOOP_LAG_P99_MS - 0.5] * 100
    ours = [0.0] * 100  # the loop's thread never waited for a CPU
    h = summarize(
        {
            "a": {"cpu": [0.1], "lag_ms": under, "runq_ms": ours},
            "b": {"cpu": [0.1], "lag_ms": just_over, "runq_ms": ours},
        }
    )
    assert h["workers"]["a"]["client_bound"] is False and h["workers"]["b"]["client_bound"] is True
    assert h["client_bound"] is True and h["thresholds"]["loop_lag_p99_ms"] == LOOP_LAG_P99_MS
    assert h["workers"]["b"]["verdict"] == h["verdict"] == "loop_blocked"


def test_the_masters_samples_stay_bounded_and_fair() -> None:
    """A long run's master keeps at most KEPT_SAMPLES lag/CPU probes per worker (the soak benchmark saw the raw
    lists grow ~2.6 MiB/h per worker); the summary's percentiles stay close, the maxima and GC sums exact."""
    import random as _random

    from vllm_users.measure.health import KEPT_SAMPLES, bound, summarize

    rng = _random.Random(5)
    acc: dict[str, list[float]] = {"cpu": [], "lag_ms": []}
    full: dict[str, list[float]] = {
        "cpu": [],
        "lag_ms": [],
        "runq_ms": [],
        "gc_ms": [],
        "gc_count": [],
        "gc_total_ms": [],
    }
    for batch in range(3000):  # 50 minutes of 1-s batches, 20 probes each
        lag = [rng.expovariate(1.0) for _ in range(20)]
        if batch == 1777:
            lag[3] = 400.0  # one stall: the max must survive the thinning
        part = {
            "cpu": [rng.random() * 0.5],
            "lag_ms": lag,
            "runq_ms": [x * 0.5 for x in lag],
            "gc_ms": [1.5],
            "gc_count": [1.0],
            "gc_total_ms": [1.5],
        }
        for k, v in part.items():
            acc.setdefault(k, []).extend(v)
            full[k].extend(v)
        bound(acc)
    assert len(acc["lag_ms"]) <= KEPT_SAMPLES and len(acc["runq_ms"]) == len(acc["lag_ms"])
    got, want = summarize({"w": acc})["workers"]["w"], summarize({"w": full})["workers"]["w"]
    assert got["loop_lag_max_ms"] == want["loop_lag_max_ms"] == 400.0
    assert abs(got["loop_lag_p99_ms"] - want["loop_lag_p99_ms"]) < 0.1 * want["loop_lag_p99_ms"]
    assert abs(got["cpu_mean"] - want["cpu_mean"]) < 0.02 and got["cpu_max"] <= want["cpu_max"]
    assert got["gc_collections"] == want["gc_collections"] == 3000 and got["gc_pauses_over_1ms"] == 3000
