"""The report's GPU panel under the throughput over time: total power and mean utilisation of --gpu-metrics' GPUs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["gpu_panel", "gpu_series"]


def gpu_series(result: Mapping[str, Any]) -> dict[str, Any] | None:
    """result.json's `energy` time series (t, power_w, util_pct); None when the run has none."""
    block = result.get("energy") or {}
    ts = block.get("timeseries") if isinstance(block, Mapping) else None
    return ts if ts and ts.get("t") else None


def gpu_panel(ax: Any, ts: Mapping[str, Any], t0: float) -> None:
    """Power (W, left axis) and utilisation (%, right axis) over the seconds since the first request."""
    t = np.asarray(ts["t"], dtype=float) - t0
    power = np.asarray([np.nan if v is None else v for v in ts["power_w"]], dtype=float)
    util = np.asarray([np.nan if v is None else v for v in ts["util_pct"]], dtype=float)
    ax.plot(t, power, label="GPU power W (all GPUs)", color="C8")
    ax.set_ylabel("W")
    ax.set_ylim(bottom=0)
    if not np.isnan(util).all():
        ax2 = ax.twinx()
        ax2.plot(t, util, label="GPU util % (mean)", color="C6", lw=1)
        ax2.set_ylim(0, 105)
        ax2.set_ylabel("%")
        ax2.legend(loc="upper right", fontsize=7)
    ax.set_title("GPU power and utilisation (--gpu-metrics)")
    ax.legend(loc="upper left", fontsize=7)
