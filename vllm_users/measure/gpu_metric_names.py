"""The GPU exporters' Prometheus names that `--gpu-metrics` reads, mapped onto one set of fields per GPU.

Two exporters are read: NVIDIA's DCGM exporter (`DCGM_FI_DEV_*`, also what `vllm-locust gpu-exporter` serves) and
AMD's device-metrics exporter (`GPU_*`). Each name maps to a field and the factor that brings its unit to the
field's: the energy counters (DCGM: mJ, AMD: uJ) become joules, memory MiB (AMD's MB taken as MiB, as it writes
them). A GPU is named by its host label and its index label (`Hostname`/`gpu` for DCGM, `hostname`/`gpu_id` for
AMD); without a host label the exporter's URL stands for the host.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ENERGY",
    "FIELDS",
    "GPU_LABELS",
    "HOST_LABELS",
    "MEMORY_USED",
    "POWER",
    "POWER_THROTTLE_BITS",
    "SM_CLOCK",
    "THERMAL_THROTTLE_BITS",
    "THROTTLE_POWER",
    "THROTTLE_REASONS",
    "THROTTLE_THERMAL",
    "UTIL",
    "XID",
    "Source",
]

# the fields of one GPU's sample, as the samples file keeps them ("power_w|HOST:GPU")
POWER = "power_w"  # gauge, W
ENERGY = "energy_counter_j"  # counter since the driver loaded, J
UTIL = "util_pct"  # gauge, % of the time a kernel ran
MEMORY_USED = "memory_used_mib"  # gauge, MiB
SM_CLOCK = "sm_clock_mhz"  # gauge, MHz
THROTTLE_REASONS = "throttle_reasons"  # NVML's clock-event bitmask (DCGM)
THROTTLE_POWER = "throttle_power_s"  # AMD: accumulated residency of the package-power limit (a counter)
THROTTLE_THERMAL = "throttle_thermal_s"  # AMD: accumulated residency of the socket-thermal limit (a counter)
XID = "xid"  # the last XID error (DCGM: 0 = none)


@dataclass(frozen=True)
class Source:
    """One exporter name: the field it fills and the factor to the field's unit."""

    field: str
    factor: float = 1.0


FIELDS: dict[str, Source] = {
    # NVIDIA DCGM exporter (and vllm-locust gpu-exporter)
    "DCGM_FI_DEV_POWER_USAGE": Source(POWER),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Source(ENERGY, 1e-3),  # mJ
    "DCGM_FI_DEV_GPU_UTIL": Source(UTIL),
    "DCGM_FI_DEV_FB_USED": Source(MEMORY_USED),
    "DCGM_FI_DEV_SM_CLOCK": Source(SM_CLOCK),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": Source(THROTTLE_REASONS),  # the name before DCGM 3.3
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": Source(THROTTLE_REASONS),
    "DCGM_FI_DEV_XID_ERRORS": Source(XID),
    # AMD device-metrics exporter
    "GPU_PACKAGE_POWER": Source(POWER),  # MI3xx
    "GPU_AVERAGE_PACKAGE_POWER": Source(POWER),  # MI2xx
    "GPU_ENERGY_CONSUMED": Source(ENERGY, 1e-6),  # uJ
    "GPU_GFX_ACTIVITY": Source(UTIL),
    "GPU_USED_VRAM": Source(MEMORY_USED),
    "GPU_VIOLATION_PPT_RESIDENCY_ACCUMULATED": Source(THROTTLE_POWER),
    "GPU_VIOLATION_SOCKET_THERMAL_RESIDENCY_ACCUMULATED": Source(THROTTLE_THERMAL),
}
HOST_LABELS = ("Hostname", "hostname")
GPU_LABELS = ("gpu", "gpu_id")
# NVML's clock-event reasons (nvmlClocksEventReason*): software power cap, hardware power brake; software and
# hardware thermal slowdown. Idle (0x1) and application clocks (0x2) are not throttling.
POWER_THROTTLE_BITS = 0x4 | 0x80
THERMAL_THROTTLE_BITS = 0x20 | 0x40
