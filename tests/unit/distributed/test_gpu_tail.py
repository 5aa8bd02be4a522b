"""The GPUs while the run goes: the tails of the --gpu-metrics samples files (energy since the first scrape, a
reset counted from 0, a line being written read next time), the LLM tab's row and the live Prometheus gauges."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vllm_users.distributed.views import prometheus_export as P
from vllm_users.distributed.views.gpu_tail import GpuTail, gpu_row
from vllm_users.options import build


def _line(t: float, **v: float) -> str:
    return json.dumps({"t": t, "v": {k.replace("__", "|"): x for k, x in v.items()}}) + "\n"


def _write(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def test_energy_so_far_power_and_util(tmp_path: Path) -> None:
    f0, f1 = tmp_path / "gpu_metrics.jsonl", tmp_path / "gpu_metrics.1.jsonl"
    _write(f0, _line(0, **{"energy_counter_j__a:0": 1000.0, "power_w__a:0": 300.0, "util_pct__a:0": 90.0}))
    _write(f1, _line(0, **{"energy_counter_j__b:0": 50.0, "power_w__b:0": 100.0, "util_pct__b:0": 30.0}))
    tail = GpuTail(str(tmp_path))
    row = gpu_row(tail, 0)
    assert row == {
        "gpus": 2,
        "power_w": 400.0,
        "util_pct": 60.0,
        "energy_so_far_j": 0.0,
        "j_per_output_token": None,
    }
    _write(f0, _line(2, **{"energy_counter_j__a:0": 1600.0, "power_w__a:0": 310.0}))
    _write(f1, _line(2, **{"energy_counter_j__b:0": 20.0}))  # a reset: 20 J from 0
    _write(f0, '{"t": 4, "v": {"energy_counter_j|a:0": 99')  # torn: read once it is whole
    row = gpu_row(tail, 310)
    assert row is not None and row["energy_so_far_j"] == 600.0 + 20.0 and row["power_w"] == 410.0
    assert row["j_per_output_token"] == 2.0


def test_no_counter_no_energy_and_no_gpu_no_row(tmp_path: Path) -> None:
    assert gpu_row(GpuTail(str(tmp_path)), 10) is None
    _write(tmp_path / "gpu_metrics.jsonl", _line(0, **{"power_w__a:0": 300.0}))
    row = gpu_row(GpuTail(str(tmp_path)), 10)
    assert row is not None and row["energy_so_far_j"] is None and row["j_per_output_token"] is None


def test_prometheus_exports_each_gpu(tmp_path: Path) -> None:
    run = tmp_path / "run-x"
    run.mkdir()
    _write(run / "gpu_metrics.jsonl", _line(0, **{"energy_counter_j__a:0": 10.0, "power_w__a:0": 250.0}))
    _write(run / "gpu_metrics.jsonl", _line(1, **{"energy_counter_j__a:0": 260.0, "power_w__a:0": 250.0}))
    exp = P.Exporter(build(results_dir=str(run)))
    text = generate_latest(exp.registry).decode()
    got = {
        (s.name, s.labels.get("gpu")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name.startswith("vllm_locust_gpu_")
    }
    assert got == {
        ("vllm_locust_gpu_power_watts", "a:0"): 250.0,
        ("vllm_locust_gpu_energy_joules", "a:0"): 250.0,
    }
