"""--gpu-metrics against a recorded DCGM exporter text served by a test server whose energy counter advances by a
known amount at each scrape: the joules over the scrapes are exact, a counter reset is not summed negative, and
the preflight names an exporter that cannot be reached or serves no GPU field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration.server.gpu_scrape import gpu_samplers, preflight_line
from tests.fake_dcgm import serve_page
from vllm_users.measure import metric_keys as K
from vllm_users.measure.energy import energy_block
from vllm_users.measure.energy_run import gpu_files, read_gpus
from vllm_users.measure.gpu_options import GpuOptions
from vllm_users.measure.gpu_samples import parse_gpu_metrics
from vllm_users.measure.server_counters import read_samples

TEMPLATE = (Path(__file__).resolve().parents[2] / "data" / "gpu" / "dcgm_exporter.txt").read_text()
GPU0_J_PER_SCRAPE = 1000  # 1e6 mJ
GPU1_J_PER_SCRAPE = 500
GPU1_RESET_AT = 2  # scrape 2 reads 100 J: the driver reloaded, the counter restarted from 0


def dcgm_text(k: int) -> str:
    """The exporter's text at its k-th scrape (from 0)."""
    e1 = 2e9 + k * GPU1_J_PER_SCRAPE * 1000 if k < GPU1_RESET_AT else (100 + (k - GPU1_RESET_AT) * 500) * 1000
    return (
        TEMPLATE.replace("{power0}", str(300 + k))
        .replace("{power1}", "150")
        .replace("{energy0}", str(5e9 + k * GPU0_J_PER_SCRAPE * 1000))
        .replace("{energy1}", str(e1))
        .replace("{reasons0}", "4" if k % 2 else "0")
    )


class _Exporter:
    """The recorded text at each scrape's place in the schedule, or a fixed `body`."""

    def __init__(self) -> None:
        self.scrapes = 0
        self.body: str | None = None

    def page(self) -> str:
        text = self.body if self.body is not None else dcgm_text(self.scrapes)
        self.scrapes += 1
        return text


@pytest.fixture
def exporter() -> Iterator[tuple[str, _Exporter]]:
    state = _Exporter()
    url, stop = serve_page(state.page)
    try:
        yield url, state
    finally:
        stop()


def test_recorded_dcgm_text_parses_per_gpu_in_joules() -> None:
    v = parse_gpu_metrics(dcgm_text(0))
    assert v["energy_counter_j|node-a:0"] == 5e6 and v["power_w|node-a:0"] == 300.0
    assert v["util_pct|node-a:1"] == 88.0 and v["memory_used_mib|node-a:0"] == 72011.0
    assert v["sm_clock_mhz|node-a:1"] == 1755.0 and v["xid|node-a:0"] == 0.0
    assert not any(k.startswith("DCGM_FI_PROF") for k in v)  # fields not read are left out


def test_scraped_energy_is_exact_and_a_reset_is_not_negative(
    exporter: tuple[str, _Exporter], tmp_path: Path
) -> None:
    url, handler = exporter
    samplers, lines = gpu_samplers(GpuOptions(gpu_metrics=(url,)), str(tmp_path))
    assert lines == []
    for _ in range(3):  # more scrapes than the two around the load, on a known schedule (no waiting)
        samplers[0]._write(samplers[0].scrape_once())
    samplers[0].stop()
    samples, bad = read_samples(str(tmp_path / "gpu_metrics.jsonl"))
    n = len(samples)
    assert bad == 0 and n == handler.scrapes >= 5
    gpus, notes = read_gpus(gpu_files(str(tmp_path)))
    assert sorted(gpus) == ["node-a:0", "node-a:1"] and notes == []
    start, end = samples[0]["t"], samples[-1]["t"]
    block = energy_block(gpus, start, end, output_tokens=4000, requests=20)
    gpu1 = GPU1_J_PER_SCRAPE * (GPU1_RESET_AT - 1) + 100 + GPU1_J_PER_SCRAPE * (n - 1 - GPU1_RESET_AT)
    assert block["per_gpu"]["node-a:0"][K.ENERGY_J] == GPU0_J_PER_SCRAPE * (n - 1)
    assert block["per_gpu"]["node-a:1"][K.ENERGY_J] == gpu1
    assert block["per_gpu"]["node-a:1"]["counter_resets"] == 1
    assert block[K.ENERGY_J] == GPU0_J_PER_SCRAPE * (n - 1) + gpu1
    assert block[K.ENERGY_PER_OUTPUT_TOKEN_J] == block[K.ENERGY_J] / 4000
    assert block[K.PEAK_POWER_W] == 300 + (n - 1) + 150
    assert block["throttle_power_share"] == pytest.approx((n // 2) / n)


def test_preflight_names_an_unreachable_exporter(tmp_path: Path) -> None:
    from orchestration.launch.ports import free_port

    url = f"http://127.0.0.1:{free_port()}/metrics"
    samplers, lines = gpu_samplers(GpuOptions(gpu_metrics=(url,)), str(tmp_path))
    for s in samplers:
        s.stop()
    assert len(lines) == 1 and url in lines[0] and "cannot be reached" in lines[0]
    assert "goes on without" in lines[0] and "\n" not in lines[0]


def test_preflight_names_an_exporter_without_gpu_fields(
    exporter: tuple[str, _Exporter], tmp_path: Path
) -> None:
    url, handler = exporter
    handler.body = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"
    samplers, lines = gpu_samplers(GpuOptions(gpu_metrics=(url,)), str(tmp_path))
    samplers[0].stop()
    assert preflight_line(samplers[0]) == lines[0]
    assert "serves no GPU field" in lines[0]
    gpus, notes = read_gpus(gpu_files(str(tmp_path)))
    assert gpus == {} and notes == ["gpu_metrics.jsonl: no GPU sample"]
    assert energy_block(gpus, 0.0, 1.0, output_tokens=1, requests=1)["available"] is False
