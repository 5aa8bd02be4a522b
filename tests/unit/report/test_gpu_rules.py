"""The GPU rules (orchestration.report.gpu_rules): each fires on its cause, stays quiet beside it, and gives
nothing where the number it reads is absent (a run without --gpu-metrics)."""

from __future__ import annotations

from typing import Any

import numpy as np

from orchestration.report.diagnose import diagnose
from orchestration.report.gpu_rules import (
    GPU_IDLE_UTIL_MAX,
    THROTTLE_SHARE_MIN,
    TTFT_GROWTH_MIN,
    gpu_idle_ttft_grows,
    gpu_throttled,
)
from orchestration.report.postprocess import RunData
from vllm_users.measure import metric_keys as K


def _run(energy: dict[str, Any] | None, ttft_ms: np.ndarray | None = None) -> RunData:
    res: dict[str, Any] = {K.COMPLETED: 90, K.FAILED: 0}
    if energy is not None:
        res["energy"] = {"available": True, **energy}
    run = RunData("/nowhere", "r", res, "result.json")
    if ttft_ms is not None:
        run.arrays["ttft"] = ttft_ms
        run.ttft_starts_s = np.arange(ttft_ms.size, dtype=float)
    return run


def _growing(factor: float, n: int = 90) -> np.ndarray:
    return np.linspace(0.020, 0.020 * factor, n)  # seconds, as the report holds TTFTs


def test_throttling_fires_on_power_and_thermal() -> None:
    f = gpu_throttled(_run({"throttle_power_share": THROTTLE_SHARE_MIN, "throttle_thermal_share": 0.9}))
    assert [x.rule for x in f] == ["gpu_throttled_power", "gpu_throttled_thermal"]
    assert "90%" in f[1].evidence


def test_throttling_quiet_below_threshold_and_absent() -> None:
    assert gpu_throttled(_run({"throttle_power_share": THROTTLE_SHARE_MIN - 0.01})) == []
    assert gpu_throttled(_run({})) == []
    assert gpu_throttled(_run(None)) == []


def test_idle_gpu_with_growing_ttft_fires() -> None:
    f = gpu_idle_ttft_grows(_run({K.GPU_UTIL_MEAN: 20.0}, _growing(TTFT_GROWTH_MIN * 1.5)))
    assert [x.rule for x in f] == ["gpu_idle_ttft_grows"] and "20 %" in f[0].evidence
    assert "median TTFT 26.5 ms -> 53.5 ms" in f[0].evidence  # each third's median, in ms


def test_idle_gpu_quiet_when_ttft_flat_or_gpu_busy_or_absent() -> None:
    flat = np.full(90, 0.025)
    assert gpu_idle_ttft_grows(_run({K.GPU_UTIL_MEAN: 20.0}, flat)) == []
    grows = _growing(TTFT_GROWTH_MIN * 2)
    assert gpu_idle_ttft_grows(_run({K.GPU_UTIL_MEAN: GPU_IDLE_UTIL_MAX + 1}, grows)) == []
    assert gpu_idle_ttft_grows(_run({}, grows)) == []  # no utilisation read
    assert gpu_idle_ttft_grows(_run(None, grows)) == []
    assert gpu_idle_ttft_grows(_run({K.GPU_UTIL_MEAN: 20.0}, grows[:20])) == []  # too few to see a trend


def test_the_rules_are_in_the_diagnosis() -> None:
    rules = {
        f.rule for f in diagnose([_run({"throttle_thermal_share": 1.0, K.GPU_UTIL_MEAN: 10.0}, _growing(5))])
    }
    assert {"gpu_throttled_thermal", "gpu_idle_ttft_grows"} <= rules
