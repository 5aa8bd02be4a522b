"""The GPU's figures over a run's measured window: energy, power, joules per token, utilisation, throttling.

From each GPU's samples (vllm_users.measure.gpu_samples.series_of) and the window [start, end] (epoch s: the
first measured request's dispatch to the last one's end):

- energy: the GPU's energy counter read at both ends of the window (linear between the two scrapes around each
  end), the increase between them. A counter that goes back (a driver reload) counts its new value from 0, never a
  negative step. Without a counter: the trapezoid integral of the power gauge, and `source` says so. The run's
  energy is the sum over every GPU of every --gpu-metrics URL; absent (with the reason) when any GPU's samples
  do not reach both ends of the window: a sum over some GPUs only would be a wrong number, not a smaller one.
- mean power: the energy over the window's length; peak power: the highest sum over the GPUs at a scrape inside
  the window (the others' power interpolated at that time).
- J per output token and per request, output tokens per J: the energy over the measured requests' figures.
- utilisation, memory and SM clock: the mean (memory: the max) of the scrapes inside the window; throttling: the
  share of those scrapes with a power or thermal clock-event reason set (AMD: of the scrape intervals in which its
  violation residency counter advanced); XID errors: the codes seen.
A figure that does not apply is absent, and `absent` says why; never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_users.measure import metric_keys as K
from vllm_users.measure.gpu_metric_names import (
    ENERGY,
    MEMORY_USED,
    POWER,
    POWER_THROTTLE_BITS,
    SM_CLOCK,
    THERMAL_THROTTLE_BITS,
    THROTTLE_POWER,
    THROTTLE_REASONS,
    THROTTLE_THERMAL,
    UTIL,
    XID,
)
from vllm_users.measure.gpu_samples import GpuSeries

__all__ = ["J_PER_KWH", "energy_block", "gpu_energy", "interpolate", "power_integral", "unwrapped"]

J_PER_KWH = 3.6e6
Points = Sequence[tuple[float, float]]


def unwrapped(pts: Points) -> tuple[list[tuple[float, float]], int]:
    """A counter's points made monotone: a step back (a reset) adds the new value, as if counted from 0; and the
    number of resets."""
    out: list[tuple[float, float]] = []
    resets = 0
    for t, v in pts:
        if not out:
            out.append((t, v))
            continue
        prev_raw = pts[len(out) - 1][1]
        step = v - prev_raw
        if step < 0:
            resets += 1
            step = v
        out.append((t, out[-1][1] + step))
    return out, resets


def interpolate(pts: Points, t: float) -> float | None:
    """The value at `t`, linear between the two points around it; None outside the points' span."""
    if not pts or t < pts[0][0] or t > pts[-1][0]:
        return None
    for (t0, v0), (t1, v1) in zip(pts, pts[1:], strict=False):
        if t0 <= t <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return pts[-1][1]  # a single point at t


def power_integral(pts: Points, start: float, end: float) -> float | None:
    """The trapezoid integral (J) of a power gauge over [start, end]; None unless its points cover the window."""
    a, b = interpolate(pts, start), interpolate(pts, end)
    if a is None or b is None:
        return None
    inner = [(t, v) for t, v in pts if start < t < end]
    knots = [(start, a), *inner, (end, b)]
    return sum((t1 - t0) * (v0 + v1) / 2.0 for (t0, v0), (t1, v1) in zip(knots, knots[1:], strict=False))


def _inside(pts: Points, start: float, end: float) -> list[float]:
    return [v for t, v in pts if start <= t <= end]


def _share_advanced(pts: Points, start: float, end: float) -> float | None:
    """Share of the scrape intervals inside the window in which a residency counter advanced."""
    inner = [(t, v) for t, v in pts if start <= t <= end]
    pairs = list(zip(inner, inner[1:], strict=False))
    return sum(1 for (_, a), (_, b) in pairs if b > a) / len(pairs) if pairs else None


def gpu_energy(series: GpuSeries, start: float, end: float) -> dict[str, Any]:
    """One GPU's figures over [start, end]: energy (J) and its source, mean/peak power, utilisation, memory,
    clock, throttling, XID codes; `absent` names each figure missing and why."""
    out: dict[str, Any] = {}
    absent: dict[str, str] = {}
    counter = series.get(ENERGY) or []
    power = series.get(POWER) or []
    if counter:
        pts, resets = unwrapped(counter)
        a, b = interpolate(pts, start), interpolate(pts, end)
        if a is not None and b is not None:
            out.update({K.ENERGY_J: b - a, "source": "counter", "counter_resets": resets})
    if K.ENERGY_J not in out:
        integral = power_integral(power, start, end)
        if integral is not None:
            out.update({K.ENERGY_J: integral, "source": "power_integral"})
        else:
            why = "energy counter" if counter else "power gauge"
            absent[K.ENERGY_J] = (
                f"the GPU's {why} scrapes do not cover the measured window"
                if counter or power
                else "the exporter serves neither an energy counter nor power"
            )
    if K.ENERGY_J in out and end > start:
        out[K.MEAN_POWER_W] = out[K.ENERGY_J] / (end - start)
    inside = _inside(power, start, end)
    if inside:
        out[K.PEAK_POWER_W] = max(inside)
    else:
        absent[K.PEAK_POWER_W] = "no power scrape inside the measured window"
    for key, field, agg in (
        (K.GPU_UTIL_MEAN, UTIL, "mean"),
        ("memory_used_max_mib", MEMORY_USED, "max"),
        ("sm_clock_mean_mhz", SM_CLOCK, "mean"),
    ):
        vals = _inside(series.get(field) or [], start, end)
        if vals:
            out[key] = max(vals) if agg == "max" else sum(vals) / len(vals)
    reasons = [int(v) for v in _inside(series.get(THROTTLE_REASONS) or [], start, end)]
    if reasons:
        out["throttle_power_share"] = sum(1 for r in reasons if r & POWER_THROTTLE_BITS) / len(reasons)
        out["throttle_thermal_share"] = sum(1 for r in reasons if r & THERMAL_THROTTLE_BITS) / len(reasons)
    for key, field in (
        ("throttle_power_share", THROTTLE_POWER),
        ("throttle_thermal_share", THROTTLE_THERMAL),
    ):
        share = _share_advanced(series.get(field) or [], start, end)
        if share is not None and key not in out:
            out[key] = share
    xids = sorted({int(v) for v in _inside(series.get(XID) or [], start, end) if v})
    if series.get(XID):
        out["xid_errors"] = xids
    if absent:
        out["absent"] = absent
    return out


def energy_block(
    gpus: Mapping[str, GpuSeries],
    start: float | None,
    end: float | None,
    *,
    output_tokens: int | None,
    requests: int | None,
    energy_price: float | None = None,
    max_points: int = 600,
) -> dict[str, Any]:
    """result.json's `energy` block: the run's sums over every GPU, each GPU's own figures, the time series."""
    if not gpus:
        return {"available": False, "reason": "the GPU exporters served no GPU field"}
    if start is None or end is None or end <= start:
        return {"available": False, "reason": "no measured request: no window to read the GPUs over"}
    per_gpu = {g: gpu_energy(s, start, end) for g, s in sorted(gpus.items())}
    out: dict[str, Any] = {
        "available": True,
        "window": {"start": start, "end": end, "duration_s": end - start},
        "gpus": len(per_gpu),
    }
    absent: dict[str, str] = {}
    missing = [g for g, f in per_gpu.items() if K.ENERGY_J not in f]
    if missing:
        absent[K.ENERGY_J] = f"GPU {missing[0]}: {per_gpu[missing[0]]['absent'][K.ENERGY_J]}"
    else:
        energy = sum(f[K.ENERGY_J] for f in per_gpu.values())
        sources = {f["source"] for f in per_gpu.values()}
        out["source"] = sources.pop() if len(sources) == 1 else "mixed"
        out[K.ENERGY_J] = energy
        out[K.MEAN_POWER_W] = energy / (end - start)
        out["counter_resets"] = sum(f.get("counter_resets", 0) for f in per_gpu.values())
    peak = _peak_total(gpus, start, end)
    if peak is not None:
        out[K.PEAK_POWER_W] = peak
    elif not any(_inside(s.get(POWER) or [], start, end) for s in gpus.values()):
        absent[K.PEAK_POWER_W] = "no power scrape inside the measured window (shorter than the 2 s interval?)"
    else:
        absent[K.PEAK_POWER_W] = "not every GPU's power scrapes cover the measured window"
    utils = [f[K.GPU_UTIL_MEAN] for f in per_gpu.values() if K.GPU_UTIL_MEAN in f]
    if utils:
        out[K.GPU_UTIL_MEAN] = sum(utils) / len(utils)
    _per_work(out, absent, output_tokens, requests)
    _priced(out, absent, energy_price, output_tokens)
    for key in ("throttle_power_share", "throttle_thermal_share"):
        shares = [f[key] for f in per_gpu.values() if key in f]
        if shares:
            out[key] = max(
                shares
            )  # the most throttled GPU: one slow GPU holds back its whole tensor-parallel group
    xids = sorted({x for f in per_gpu.values() for x in f.get("xid_errors", ())})
    if any("xid_errors" in f for f in per_gpu.values()):
        out["xid_errors"] = xids
    if absent:
        out["absent"] = absent
    out["per_gpu"] = per_gpu
    out["timeseries"] = _timeseries(gpus, max_points)
    return out


def _per_work(out: dict[str, Any], absent: dict[str, str], tokens: int | None, requests: int | None) -> None:
    energy = out.get(K.ENERGY_J)
    if energy is None:
        for key in (K.ENERGY_PER_OUTPUT_TOKEN_J, K.ENERGY_PER_REQUEST_J, K.OUTPUT_TOKENS_PER_J):
            absent[key] = "no energy figure for the window"
        return
    if tokens:
        out[K.ENERGY_PER_OUTPUT_TOKEN_J] = energy / tokens
        if energy > 0:
            out[K.OUTPUT_TOKENS_PER_J] = tokens / energy
    else:
        for key in (K.ENERGY_PER_OUTPUT_TOKEN_J, K.OUTPUT_TOKENS_PER_J):
            absent[key] = "no output token in the measured window"
    if requests:
        out[K.ENERGY_PER_REQUEST_J] = energy / requests
    else:
        absent[K.ENERGY_PER_REQUEST_J] = "no completed request in the measured window"


def _priced(out: dict[str, Any], absent: dict[str, str], price: float | None, tokens: int | None) -> None:
    energy = out.get(K.ENERGY_J)
    if energy is None:
        return
    out[K.ENERGY_KWH] = energy / J_PER_KWH
    if price is None:
        return
    out["energy_price_usd_per_kwh"] = price
    out[K.ENERGY_COST_USD] = out[K.ENERGY_KWH] * price
    if tokens:
        out[K.ENERGY_USD_PER_MILLION_OUTPUT_TOKENS] = out[K.ENERGY_COST_USD] / tokens * 1e6
    else:
        absent[K.ENERGY_USD_PER_MILLION_OUTPUT_TOKENS] = "no output token in the measured window"


def _peak_total(gpus: Mapping[str, GpuSeries], start: float, end: float) -> float | None:
    """The highest sum of every GPU's power at a power scrape inside the window; None unless all cover it."""
    powers = [s.get(POWER) or [] for s in gpus.values()]
    times = sorted({t for pts in powers for t, _ in pts if start <= t <= end})
    best: float | None = None
    for t in times:
        vals = [interpolate(pts, t) for pts in powers]
        if any(v is None for v in vals):
            return None
        total = math.fsum(v for v in vals if v is not None)
        best = total if best is None else max(best, total)
    return best


def _timeseries(gpus: Mapping[str, GpuSeries], max_points: int) -> dict[str, list[float | None]]:
    """Total power and mean utilisation over the GPUs at each scrape (the report's figure beside throughput)."""
    powers = [s.get(POWER) or [] for s in gpus.values()]
    utils = [s.get(UTIL) or [] for s in gpus.values()]
    times = sorted({t for pts in powers + utils for t, _ in pts})
    step = max(1, math.ceil(len(times) / max_points))
    out: dict[str, list[float | None]] = {"t": [], "power_w": [], "util_pct": []}
    for t in times[::step]:
        p = [interpolate(pts, t) for pts in powers if pts]
        u = [interpolate(pts, t) for pts in utils if pts]
        out["t"].append(t)
        # JSON has no NaN: a time not every GPU's scrapes reach is null
        out["power_w"].append(math.fsum(x for x in p if x is not None) if p and None not in p else None)
        good = [x for x in u if x is not None]
        out["util_pct"].append(sum(good) / len(good) if good else None)
    return out
