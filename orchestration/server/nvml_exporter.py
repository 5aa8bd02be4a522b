"""`vllm-locust gpu-exporter`'s reading: NVML through nvidia-ml-py (`pynvml`), served as DCGM exporter's names.

For hosts without DCGM. Each scrape reads every GPU once: power (W; NVML gives mW), the energy counter (mJ, as
DCGM's), utilisation (%), memory used (MiB), SM clock (MHz), the clock-event reasons (NVML's bitmask) and the last
XID error seen since the exporter started (NVML's critical-XID events, polled without waiting). A field the GPU
does not support (NVML_ERROR_NOT_SUPPORTED: the energy counter before Volta) is left out, never written as 0;
`--gpu-metrics` then integrates power instead (docs/energy.md). The library is passed in: tests give a fake.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["NvmlReader", "exposition"]

# (DCGM name, type, help): the fields of vllm_users.measure.gpu_metric_names, in DCGM exporter's spelling
_FIELDS = (
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "Current clock event reasons (bitmask)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


def exposition(rows: list[tuple[dict[str, str], dict[str, float]]]) -> str:
    """Prometheus text of each GPU's (labels, {DCGM name: value}), grouped by name as the format asks."""
    out: list[str] = []
    for name, kind, help_text in _FIELDS:
        have = [(labels, vals[name]) for labels, vals in rows if name in vals]
        if not have:
            continue
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for labels, v in have:
            lab = ",".join(f'{k}="{_label(x)}"' for k, x in labels.items())
            # every digit: a counter of 1e11 mJ in %g's six digits would step by 100 J
            num = str(int(v)) if float(v).is_integer() else repr(float(v))
            out.append(f"{name}{{{lab}}} {num}")
    return "\n".join(out) + "\n"


class NvmlReader:
    """Every GPU's fields through `nvml` (the pynvml module, initialised here); one read per scrape."""

    def __init__(self, nvml: Any, hostname: str) -> None:
        self.nvml = nvml
        self.hostname = hostname
        nvml.nvmlInit()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        self.labels = [
            {
                "gpu": str(i),
                "UUID": _text(nvml.nvmlDeviceGetUUID(h)),
                "modelName": _text(nvml.nvmlDeviceGetName(h)),
                "Hostname": hostname,
            }
            for i, h in enumerate(self.handles)
        ]
        self.last_xid = [0] * len(self.handles)
        self._lock = threading.Lock()  # scrapes come on the server's threads; the XID events are drained once
        self._events = self._xid_events()

    def _xid_events(self) -> Any:
        """An NVML event set for the GPUs' critical XID errors; None where NVML offers none."""
        n = self.nvml
        try:
            events = n.nvmlEventSetCreate()
            for h in self.handles:
                n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, events)
            return events
        except n.NVMLError:
            return None

    def _drain_xids(self) -> None:
        n = self.nvml
        if self._events is None:
            return
        for _ in range(1000):  # bounded: the events since the last scrape
            try:
                data = n.nvmlEventSetWait_v2(self._events, 0)
            except n.NVMLError:  # NVML_ERROR_TIMEOUT: none left
                return
            # by NVML's index: the event's handle is another ctypes pointer object, never == to ours
            try:
                i = n.nvmlDeviceGetIndex(data.device)
            except n.NVMLError:
                continue
            if 0 <= i < len(self.last_xid):
                self.last_xid[i] = int(data.eventData)

    def _one(self, i: int, h: Any) -> dict[str, float]:
        n = self.nvml
        reads = (
            ("DCGM_FI_DEV_POWER_USAGE", lambda: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", lambda: float(n.nvmlDeviceGetTotalEnergyConsumption(h))),
            ("DCGM_FI_DEV_GPU_UTIL", lambda: float(n.nvmlDeviceGetUtilizationRates(h).gpu)),
            ("DCGM_FI_DEV_FB_USED", lambda: n.nvmlDeviceGetMemoryInfo(h).used / (1 << 20)),
            ("DCGM_FI_DEV_SM_CLOCK", lambda: float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))),
            ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", lambda: float(self._reasons(h))),
        )
        out: dict[str, float] = {}
        for name, read in reads:
            try:
                out[name] = read()
            except n.NVMLError:  # not supported on this GPU (or driver): left out, never 0
                continue
        if self._events is not None:
            out["DCGM_FI_DEV_XID_ERRORS"] = float(self.last_xid[i])
        return out

    def _reasons(self, h: Any) -> int:
        n = self.nvml
        read = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
            n.nvmlDeviceGetCurrentClocksThrottleReasons  # nvidia-ml-py before 12.535
        )
        return int(read(h))

    def read(self) -> str:
        """One scrape of every GPU as Prometheus text."""
        with self._lock:
            self._drain_xids()
            rows = [(self.labels[i], self._one(i, h)) for i, h in enumerate(self.handles)]
        return exposition(rows)

    def close(self) -> None:
        """Free the event set and shut NVML down."""
        n = self.nvml
        try:
            if self._events is not None:
                n.nvmlEventSetFree(self._events)
            n.nvmlShutdown()
        except n.NVMLError:
            pass
