"""The diagnosis of the GPUs' own view (result.json's `energy`, from --gpu-metrics: vllm_users.measure.energy).

- `gpu_throttled`: the GPU lowered its clocks for power or heat in a share of the measured window's scrapes: its
  throughput is the throttled GPU's, not the card's.
- `gpu_idle_ttft_grows`: the GPUs were mostly idle while the client's TTFT grew over the run: the requests wait
  before the GPU (the API server, the network, a proxy), so a faster GPU or engine setting would not help.
"""

from __future__ import annotations

import numpy as np

from orchestration.report.findings import Finding
from orchestration.report.postprocess import RunData
from vllm_users.measure import metric_keys as K

__all__ = [
    "GPU_IDLE_UTIL_MAX",
    "THROTTLE_SHARE_MIN",
    "TTFT_GROWTH_MIN",
    "TTFT_GROWTH_MIN_SUCCESSES",
    "gpu_idle_ttft_grows",
    "gpu_throttled",
]

THROTTLE_SHARE_MIN = 0.20  # a power or thermal clock-event reason in at least a fifth of the window's scrapes
GPU_IDLE_UTIL_MAX = 50.0  # % mean utilisation over the window: below it the GPUs mostly waited...
TTFT_GROWTH_MIN = (
    2.0  # ...while the median TTFT of the run's last third is at least this multiple of its first's
)
TTFT_GROWTH_MIN_SUCCESSES = 30  # fewer streamed successes: no verdict on a trend


def gpu_throttled(run: RunData) -> list[Finding]:
    """A warning when a GPU throttled (power or thermal) in the measured window."""
    e = run.result.get("energy") or {}
    out = []
    for key, kind, action in (
        (
            "throttle_power_share",
            "power",
            "The GPU hit its power limit: check `nvidia-smi -q -d POWER` (a lowered limit, a shared PSU), or "
            "accept the throttled throughput as the card's at this power cap.",
        ),
        (
            "throttle_thermal_share",
            "thermal",
            "The GPU slowed down for heat: check its cooling and temperature (`nvidia-smi -q -d TEMPERATURE`); "
            "figures from a hot card do not carry over to a cool one.",
        ),
    ):
        share = e.get(key)
        if share is None or share < THROTTLE_SHARE_MIN:
            continue
        out.append(
            Finding(
                f"gpu_throttled_{kind}",
                run.name,
                "warning",
                f"GPU throttled ({kind})",
                f"a {kind} clock-event reason in >= {THROTTLE_SHARE_MIN:.0%} of the measured window's scrapes",
                f"the most throttled GPU: {share:.0%} of its scrapes",
                action,
            )
        )
    return out


def gpu_idle_ttft_grows(run: RunData) -> list[Finding]:
    """A warning when the GPUs' mean utilisation stayed low while the client's TTFT grew over the run."""
    util = (run.result.get("energy") or {}).get(K.GPU_UTIL_MEAN)
    ttft, starts = run.arrays.get("ttft"), run.ttft_starts_s
    if util is None or util >= GPU_IDLE_UTIL_MAX or ttft is None or starts is None:
        return []
    if ttft.size < TTFT_GROWTH_MIN_SUCCESSES or starts.size != ttft.size:
        return []
    order = np.argsort(starts, kind="stable")
    third = ttft.size // 3
    # the report's TTFTs are in seconds
    first = float(np.median(ttft[order[:third]])) * 1000.0
    last = float(np.median(ttft[order[-third:]])) * 1000.0
    if first <= 0 or last < TTFT_GROWTH_MIN * first:
        return []
    return [
        Finding(
            "gpu_idle_ttft_grows",
            run.name,
            "warning",
            "TTFT grows while the GPU idles",
            f"mean GPU utilisation < {GPU_IDLE_UTIL_MAX:g} % and the last third's median TTFT >= "
            f"{TTFT_GROWTH_MIN:g}x the first third's",
            f"GPU utilisation {util:.0f} %; median TTFT {first:.1f} ms -> {last:.1f} ms",
            "The requests wait before the GPU: the API server (its event loop, tokenisation; more "
            "--api-server-count), a proxy or the network. A faster GPU or engine setting would not help.",
        )
    ]
