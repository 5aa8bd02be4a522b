"""Figures (matplotlib, Agg, no pyplot state): CDFs, time series, TTFT by turn, latency vs throughput.

Plot data is downsampled (a seeded random subsample, then a fixed set of quantile levels); the
statistics in the tables never are.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before any backend is touched: reports are rendered without a display

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from orchestration.report.energy_plot import gpu_panel, gpu_series  # noqa: E402
from orchestration.report.postprocess import MAX_SAMPLE, RunData  # noqa: E402
from vllm_users.measure import metric_keys as K
from vllm_users.measure.delivered import steady

__all__ = [
    "LEVELS",
    "Plot",
    "all_plots",
    "cdf_figure",
    "cdf_points",
    "from_zero",
    "honest_limits",
    "latency_throughput_figure",
    "scenario_figure",
    "timeseries_figure",
    "turns_figure",
]

# Quantile levels: even in the body, log-spaced towards the tail where latency problems live.
LEVELS = np.unique(np.concatenate([np.linspace(0.0, 0.99, 400), 1.0 - np.logspace(-2, -5, 120), [1.0]]))
METRIC_TITLES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}


@dataclass
class Plot:
    """One figure with a stable key (for tests and anchors) and a caption."""

    key: str
    title: str
    figure: Figure

    def png_base64(self, dpi: int = 80) -> str:
        """The figure as a base64 PNG for embedding in HTML."""
        buf = io.BytesIO()
        self.figure.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
        return base64.b64encode(buf.getvalue()).decode("ascii")


def honest_limits(values: Iterable[float]) -> tuple[float, float] | None:
    """Axis limits that keep a spread in proportion: from zero for non-negative quantities (latency, throughput,
    rates), so that a 2 % spread covers about 2 % of the axis; None without a finite value.

    Matplotlib's own limits hug the data: three steps of 100, 101 and 102 ms filled the whole axis, and a 2 %
    difference read as a cliff. Data that goes below zero (a difference) keeps its range, padded to at least a
    tenth of its largest magnitude."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return None
    lo, hi = min(finite), max(finite)
    if lo >= 0:
        return 0.0, (hi * 1.08 if hi > 0 else 1.0)
    span = hi - lo
    pad = max(0.08 * span, (0.1 * max(abs(lo), abs(hi)) - span) / 2)
    return lo - pad, hi + pad


def _plotted(ax: Any, axis: str) -> list[float]:
    """Every finite value drawn on `ax` along `axis` ("x" or "y"): its lines' and its scatters' points."""
    out: list[float] = []
    # a line across the axes (axhline for "y", axvline for "x") has data coordinates along that axis only
    across = ax.get_yaxis_transform() if axis == "y" else ax.get_xaxis_transform()
    for line in ax.get_lines():
        if line.get_transform() not in (ax.transData, across):
            continue
        data = line.get_xdata() if axis == "x" else line.get_ydata()
        out += [float(v) for v in np.asarray(data, dtype=np.float64).ravel()]
    for coll in ax.collections:
        if coll.get_offset_transform() is not ax.transData:
            continue
        offsets = np.asarray(coll.get_offsets(), dtype=np.float64)
        if offsets.ndim == 2 and offsets.shape[0]:
            out += [float(v) for v in offsets[:, 0 if axis == "x" else 1]]
    return out


def from_zero(ax: Any, axis: str = "y", extra: Iterable[float] = ()) -> None:
    """Set `ax`'s `axis` limits by honest_limits over what is drawn on it and `extra` (an SLO limit that must
    show); a log axis keeps its own."""
    if (ax.get_yscale() if axis == "y" else ax.get_xscale()) == "log":
        return
    lim = honest_limits([*_plotted(ax, axis), *extra])
    if lim is not None:
        (ax.set_ylim if axis == "y" else ax.set_xlim)(*lim)


def cdf_points(values_s: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(latency ms, cumulative fraction) at LEVELS, from at most MAX_SAMPLE values."""
    v = np.asarray(values_s, dtype=np.float64)
    if v.size > MAX_SAMPLE:
        v = v[np.random.default_rng(seed).integers(0, v.size, MAX_SAMPLE)]
    return np.quantile(v, LEVELS) * 1000.0, LEVELS


def cdf_figure(runs: Sequence[RunData]) -> Plot | None:
    """CDFs of TTFT, TPOT, ITL and E2EL, one line per run."""
    if not any(r.arrays for r in runs):
        return None
    fig = Figure(figsize=(10, 7))
    for i, m in enumerate(METRIC_TITLES):
        ax = fig.add_subplot(2, 2, i + 1)
        lo_hi: list[float] = []
        for r in runs:
            a = r.arrays.get(m)
            if a is None or a.size == 0:
                continue
            x, y = cdf_points(a)
            ax.plot(x, y, label=r.name, lw=1.5)
            lo_hi += [float(x[0]), float(x[-1])]
        positive = [v for v in lo_hi if v > 0]
        if positive and max(positive) / min(positive) > 100:
            ax.set_xscale("log")  # wide ranges (queueing tails) are unreadable on a linear axis
        ax.set_title(f"{METRIC_TITLES[m]} CDF")
        ax.set_xlabel("ms")
        ax.set_ylabel("fraction of samples")
        ax.grid(alpha=0.3)
        if len(runs) > 1 and ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return Plot("cdf", "Latency CDFs (TTFT, TPOT, ITL, E2EL)", fig)


def _server_series(run: RunData) -> dict[str, Any] | None:
    sm = run.result.get("server_metrics") or {}
    ts = sm.get("timeseries")
    return ts if ts and ts.get("t") else None


def _shade_windows(axes: Sequence[Any], windows: dict[str, Any] | None, t0: float, t_end: float) -> None:
    """Grey the warm-up and cool-down windows (left out of the statistics) on every axis."""
    if not windows or not windows.get("measured", {}).get("requests"):
        return
    m = windows["measured"]
    spans = []
    if "warmup" in windows:
        spans.append((0.0, m["start"] - t0, "warm-up (excluded)"))
    if "cooldown" in windows:
        spans.append((m["end"] - t0, t_end, "cool-down (excluded)"))
    for i, ax in enumerate(axes):
        for lo, hi, label in spans:
            if hi > lo:
                ax.axvspan(lo, hi, color="0.6", alpha=0.25, label=label if i == 0 else None)
    axes[0].legend(loc="upper left", fontsize=7)


def timeseries_figure(run: RunData) -> Plot | None:
    """Throughput, concurrency, TTFT p50/p99 over time, aligned with the server's queue and KV usage."""
    ts = run.timeseries
    if not ts or not ts.get("t"):
        return None
    server = _server_series(run)
    t0 = ts["t0"] or 0.0
    rows = 4 if server and ("kv_cache_usage" in server or "gpu_util" in server) else 3
    gpu = gpu_series(run.result)
    rows += 1 if gpu else 0
    fig = Figure(figsize=(10, 2.4 * rows))
    axes = [fig.add_subplot(rows, 1, i + 1) for i in range(rows)]
    for ax in axes[1:]:
        ax.sharex(axes[0])
    t = np.asarray(ts["t"])
    ax = axes[0]
    if "output_tokens_per_s" in ts:
        ax.plot(t, ts["output_tokens_per_s"], label="output tok/s (by completion)", color="C0")
        ax.set_ylabel("tok/s")
        ax2 = ax.twinx()
        ax2.plot(t, ts["completed_per_s"], label="completed req/s", color="C1", lw=1)
        ax2.set_ylabel("req/s")
        from_zero(ax2)
    else:
        ax.plot(t, ts["completed_per_s"], label="req/s (Locust)", color="C1")
        ax.set_ylabel("req/s")
    ax.set_title("Throughput")
    ax.legend(loc="upper left", fontsize=7)
    ax = axes[1]
    ax.plot(t, ts["inflight"], label="client in-flight", color="C2")
    if server:
        st = np.asarray(server["t"]) - t0
        for key, color in (("running", "C3"), ("waiting", "C4")):
            if key in server:
                ax.plot(st, server[key], label=f"server {key}", color=color, lw=1)
    ax.set_title("Concurrency and server queue")
    ax.legend(loc="upper left", fontsize=7)
    ax = axes[2]
    for key, label in (
        ("ttft_p50_ms", "TTFT p50"),
        ("ttft_p99_ms", "TTFT p99"),
        ("e2el_p50_ms", "E2EL p50 (Locust)"),
        ("e2el_p99_ms", "E2EL p99 (Locust)"),
    ):
        if key in ts and any(not math.isnan(v) for v in ts[key]):
            ax.plot(t, ts[key], label=label, marker=".", ms=2, lw=1)
    ax.set_title("Latency over time (ms)")
    ax.legend(loc="upper left", fontsize=7)
    if gpu:
        gpu_panel(axes[-1], gpu, t0)
    if len(axes) - (1 if gpu else 0) == 4 and server:
        ax = axes[3]
        st = np.asarray(server["t"]) - t0
        if "kv_cache_usage" in server:
            ax.plot(st, np.asarray(server["kv_cache_usage"]) * 100.0, label="KV cache usage %", color="C5")
        if "gpu_util" in server:
            ax.plot(st, server["gpu_util"], label="GPU util % (DCGM)", color="C6")
        ax.set_ylim(0, 105)
        ax.set_title("Server memory and GPU")
        ax.legend(loc="upper left", fontsize=7)
    axes[-1].set_xlabel("seconds since first request")
    for a in axes[:3]:
        from_zero(a)  # throughput, in-flight and latency: a small wobble must not fill the panel
    for a in axes:
        a.grid(alpha=0.3)
    _shade_windows(axes, run.result.get(K.WINDOWS), t0, float(t[-1]) + float(ts.get("bucket_s") or 1.0))
    fig.tight_layout()
    return Plot(f"timeseries-{run.name}", f"Over time: {run.name}", fig)


def turns_figure(runs: Sequence[RunData]) -> Plot | None:
    """TTFT p50/p99 by turn index (multi-turn: later turns should hit the prefix cache)."""
    with_turns = [r for r in runs if r.result.get("ttft_by_turn")]
    if not with_turns:
        return None
    fig = Figure(figsize=(8, 3.5))
    ax = fig.add_subplot(1, 1, 1)
    for r in with_turns:
        turns = r.result["ttft_by_turn"]
        idx = sorted(turns, key=int)
        ax.plot(
            [int(i) for i in idx],
            [turns[i]["ttft_ms"]["median"] for i in idx],
            marker="o",
            label=f"{r.name} p50",
        )
        ax.plot(
            [int(i) for i in idx],
            [turns[i]["ttft_ms"].get("p99", math.nan) for i in idx],
            marker="x",
            ls="--",
            label=f"{r.name} p99",
        )
    ax.set_xlabel("turn index")
    ax.set_ylabel("TTFT ms")
    from_zero(ax)
    ax.set_title("TTFT by turn")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return Plot("turns", "TTFT by turn index", fig)


def latency_throughput_figure(runs: Sequence[RunData]) -> Plot | None:
    """Latency versus output throughput across runs: the curve users tune on (each run's output tok/s over its
    steady interior: measure.delivered's window, the ramp and the drain left out)."""
    pts = [
        r
        for r in runs
        if steady(r.result, K.OUTPUT_THROUGHPUT) is not None
        and r.result.get(K.TTFT.key("median")) is not None
    ]
    if len(pts) < 2:
        return None
    pts.sort(key=lambda r: steady(r.result, K.OUTPUT_THROUGHPUT))
    fig = Figure(figsize=(10, 3.8))
    for i, (m, label) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"))):
        ax = fig.add_subplot(1, 2, i + 1)
        x = [steady(r.result, K.OUTPUT_THROUGHPUT) for r in pts]
        for stat in ("median", "p99"):
            key = f"{stat}_{m}_ms" if stat == "median" else f"p99_{m}_ms"
            ax.plot(x, [r.result.get(key) or math.nan for r in pts], marker="o", label=f"{label} {stat}")
        for r, xv in zip(pts, x, strict=True):
            yv = r.result.get(f"median_{m}_ms")
            if yv is not None:
                ax.annotate(r.name, (xv, yv), fontsize=6)
        from_zero(ax)
        from_zero(ax, "x")
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel("ms")
        ax.set_title(f"{label} vs throughput")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return Plot("latency-throughput", "Latency versus throughput across runs", fig)


def scenario_figure(run: RunData) -> Plot | None:
    """Per-scenario TTFT/TPOT medians and p99s (a mix of scenarios only)."""
    per = run.result.get("per_scenario") or {}
    if len(per) < 2:
        return None
    names = sorted(per)
    fig = Figure(figsize=(10, 3.5))
    for i, (m, label) in enumerate((("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL"))):
        ax = fig.add_subplot(1, 3, i + 1)
        x = np.arange(len(names))
        ax.bar(x - 0.2, [per[n].get(f"median_{m}_ms") or 0 for n in names], 0.4, label="p50")
        # p99 only where the run chose it (--percentile-metrics): no bar rather than a false zero
        ax.bar(x + 0.2, [per[n].get(f"p99_{m}_ms", math.nan) for n in names], 0.4, label="p99")
        ax.set_xticks(x, names, rotation=30, fontsize=7)
        ax.set_title(f"{label} ms by scenario")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return Plot(f"scenarios-{run.name}", f"Per scenario: {run.name}", fig)


def all_plots(runs: Sequence[RunData]) -> list[Plot]:
    """Every figure that the data supports, in reading order."""
    out: list[Plot | None] = [cdf_figure(runs), latency_throughput_figure(runs)]
    for r in runs:
        out.append(timeseries_figure(r))
        out.append(scenario_figure(r))
    out.append(turns_figure(runs))
    return [p for p in out if p is not None]
