"""The end-of-run summary's lines of an `energy` block (vllm_users.measure.energy): figures, or why they are absent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_users.measure import metric_keys as K

__all__ = ["format_energy"]

_ROWS = (
    (K.ENERGY_J, "Energy (J)", "{:.1f}"),
    (K.MEAN_POWER_W, "Mean power (W)", "{:.1f}"),
    (K.PEAK_POWER_W, "Peak power (W)", "{:.1f}"),
    (K.ENERGY_PER_OUTPUT_TOKEN_J, "Energy per output token (J)", "{:.4g}"),
    (K.ENERGY_PER_REQUEST_J, "Energy per request (J)", "{:.4g}"),
    (K.OUTPUT_TOKENS_PER_J, "Output tokens per joule", "{:.4g}"),
    (K.GPU_UTIL_MEAN, "Mean GPU utilisation (%)", "{:.1f}"),
    (K.ENERGY_KWH, "Energy (kWh)", "{:.6g}"),
    (K.ENERGY_COST_USD, "Energy cost ($)", "{:.4g}"),
    (K.ENERGY_USD_PER_MILLION_OUTPUT_TOKENS, "Energy $ per 1M output tokens", "{:.4g}"),
)
_SOURCE = {
    "counter": "the GPUs' energy counters",
    "power_integral": "the integral of the power gauge (no energy counter)",
    "mixed": "energy counters, the power integral where a GPU has none",
}


def format_energy(energy: Mapping[str, Any], width: int = 50) -> list[str]:
    """Summary lines: the run's figures over the measured window, then one line per GPU."""
    if not energy.get("available"):
        return [f"GPU figures unavailable: {energy.get('reason')}"]
    absent = energy.get("absent") or {}
    win = energy["window"]
    out = [f"{energy['gpus']} GPU(s) over the measured window ({win['duration_s']:.3g} s)"]
    if "source" in energy:
        out.append(f"energy from {_SOURCE.get(energy['source'], energy['source'])}")
    for key, label, fmt in _ROWS:
        if energy.get(key) is not None:
            out.append(f"{label + ':':<{width}}{fmt.format(energy[key]):>10}")
        elif key in absent:
            out.append(f"{label + ':':<{width}}{'n/a':>10}  ({absent[key]})")
    for key, label in (("throttle_power_share", "power"), ("throttle_thermal_share", "thermal")):
        if energy.get(key):
            out.append(f"THROTTLED ({label}) in {energy[key]:.0%} of one GPU's scrapes")
    if energy.get("xid_errors"):
        out.append(f"XID errors: {', '.join(str(x) for x in energy['xid_errors'])}")
    if energy.get("counter_resets"):
        out.append(f"energy counter reset {energy['counter_resets']} time(s): counted from 0 after each")
    per_gpu = energy.get("per_gpu") or {}
    if len(per_gpu) > 1:
        for gpu, f in per_gpu.items():
            e, p = f.get(K.ENERGY_J), f.get(K.MEAN_POWER_W)
            u = f.get(K.GPU_UTIL_MEAN)
            out.append(
                f"  GPU {gpu}: "
                + ("n/a J" if e is None else f"{e:.1f} J")
                + ("" if p is None else f", {p:.1f} W mean")
                + ("" if u is None else f", {u:.0f} % util")
            )
    return out
