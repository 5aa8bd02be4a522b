"""The client-bound thresholds: one value in code, the same in README.md and docs/metrics.md."""

from __future__ import annotations

import os
import re

from vllm_users.measure.health import CPU_BOUND_FRACTION, LOOP_LAG_P99_MS, summarize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_docs_state_the_code_thresholds() -> None:
    for doc in ("README.md", os.path.join("docs", "metrics.md")):
        text = open(os.path.join(ROOT, doc)).read()
        lag = re.findall(r"loop[ -]lag p99 (?:>|exceeds) (\d+(?:\.\d+)?) ms", text)
        cpu = re.findall(r"CPU (?:>|exceeds) (\d+) % of a core", text)
        assert lag and all(float(x) == LOOP_LAG_P99_MS for x in lag), (doc, lag)
        assert cpu and all(float(x) / 100 == CPU_BOUND_FRACTION for x in cpu), (doc, cpu)


def test_loop_lag_threshold_decides_client_bound() -> None:
    just_over = [LOOP_LAG_P99_MS + 0.5] * 100
    under = [LOOP_LAG_P99_MS - 0.5] * 100
    h = summarize({"a": {"cpu": [0.1], "lag_ms": under}, "b": {"cpu": [0.1], "lag_ms": just_over}})
    assert h["workers"]["a"]["client_bound"] is False and h["workers"]["b"]["client_bound"] is True
    assert h["client_bound"] is True and h["thresholds"]["loop_lag_p99_ms"] == LOOP_LAG_P99_MS
