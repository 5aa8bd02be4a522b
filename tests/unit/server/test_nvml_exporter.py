"""`vllm-locust gpu-exporter` through a fake of pynvml's calls: the fields it serves, in DCGM's names and units,
round-trip through --gpu-metrics' parser; a field NVML does not support is left out, never 0; XID events are
kept; the command serves /metrics and names a missing nvidia-ml-py in one line."""

from __future__ import annotations

import builtins
import threading
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest

from orchestration.commands import gpu_exporter
from orchestration.server.nvml_exporter import NvmlReader
from vllm_users.measure.gpu_samples import parse_gpu_metrics


class FakeNvml:
    """The pynvml calls the exporter makes, for two GPUs: GPU 1 has no energy counter (pre-Volta)."""

    NVML_CLOCK_SM = 1
    nvmlEventTypeXidCriticalError = 8

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.energy_mj = [123_456_789, None]
        self.power_mw = [312_500, 95_000]
        self.events: list[Any] = []
        self.shut = False

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return 100 + i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:  # noqa: N802 - older bindings return bytes
        return f"GPU-{h}".encode()

    def nvmlDeviceGetName(self, h: int) -> str:  # noqa: N802
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:  # noqa: N802
        return self.power_mw[h - 100]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:  # noqa: N802
        v = self.energy_mj[h - 100]
        if v is None:
            raise self.NVMLError("Not Supported")
        return v

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(gpu=97 if h == 100 else 12, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(used=72011 * (1 << 20), total=81559 * (1 << 20))

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:  # noqa: N802
        assert kind == self.NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:  # noqa: N802
        return 0x4 if h == 100 else 0x1

    def nvmlDeviceGetIndex(self, h: Any) -> int:  # noqa: N802
        return int(h.value) - 100  # a handle of its own, as pynvml's event data holds (a ctypes pointer)

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "events"

    def nvmlDeviceRegisterEvents(self, h: int, kind: int, events: str) -> None:  # noqa: N802
        assert kind == self.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> Any:  # noqa: N802
        assert timeout_ms == 0  # never blocks a scrape
        if not self.events:
            raise self.NVMLError("Timeout")
        return self.events.pop(0)

    def nvmlEventSetFree(self, events: str) -> None:  # noqa: N802
        pass


def test_fields_in_dcgm_names_and_units_round_trip() -> None:
    nvml = FakeNvml()
    reader = NvmlReader(nvml, "node-a")
    text = reader.read()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    v = parse_gpu_metrics(text)
    assert v["power_w|node-a:0"] == 312.5 and v["power_w|node-a:1"] == 95.0
    assert v["energy_counter_j|node-a:0"] == 123_456.789  # mJ served, J read
    assert "energy_counter_j|node-a:1" not in v  # not supported: absent, never 0
    assert v["util_pct|node-a:0"] == 97.0 and v["memory_used_mib|node-a:1"] == 72011.0
    assert v["sm_clock_mhz|node-a:0"] == 1980.0
    assert v["throttle_reasons|node-a:0"] == 4.0 and v["throttle_reasons|node-a:1"] == 1.0
    assert v["xid|node-a:0"] == 0.0
    assert 'UUID="GPU-100"' in text and 'modelName="NVIDIA H100 80GB HBM3"' in text
    reader.close()
    assert nvml.shut


def test_energy_counter_advances_between_scrapes_exactly() -> None:
    nvml = FakeNvml()
    reader = NvmlReader(nvml, "n")
    first = parse_gpu_metrics(reader.read())["energy_counter_j|n:0"]
    nvml.energy_mj[0] += 250_000  # 250 J
    assert parse_gpu_metrics(reader.read())["energy_counter_j|n:0"] - first == pytest.approx(250.0, abs=1e-9)


def test_xid_events_are_kept_per_gpu() -> None:
    nvml = FakeNvml()
    reader = NvmlReader(nvml, "n")
    # the event's device is a new object for GPU 1's handle (pynvml: a ctypes pointer, never == to ours)
    nvml.events = [SimpleNamespace(device=SimpleNamespace(value=101), eventData=79)]
    v = parse_gpu_metrics(reader.read())
    assert v["xid|n:1"] == 79.0 and v["xid|n:0"] == 0.0
    assert parse_gpu_metrics(reader.read())["xid|n:1"] == 79.0  # the last one seen, until another


def test_older_bindings_throttle_reasons_name() -> None:
    nvml = FakeNvml()
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = nvml.nvmlDeviceGetCurrentClocksEventReasons  # type: ignore[attr-defined]
    del FakeNvml.nvmlDeviceGetCurrentClocksEventReasons
    try:
        assert parse_gpu_metrics(NvmlReader(nvml, "n").read())["throttle_reasons|n:0"] == 4.0
    finally:
        FakeNvml.nvmlDeviceGetCurrentClocksEventReasons = nvml.nvmlDeviceGetCurrentClocksThrottleReasons  # type: ignore[method-assign]


def test_server_answers_metrics_and_404() -> None:
    srv = gpu_exporter.make_server(NvmlReader(FakeNvml(), "n"), "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
            assert "DCGM_FI_DEV_POWER_USAGE" in r.read().decode()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(base + "/other", timeout=5)
        assert e.value.code == 404
    finally:
        srv.shutdown()
        srv.server_close()


def test_missing_nvidia_ml_py_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    real = builtins.__import__

    def no_pynvml(name: str, *a: Any, **k: Any) -> Any:
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    rc = gpu_exporter.main(["--port", "0"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1 and "nvidia-ml-py" in err
