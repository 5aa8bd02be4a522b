"""A run directory's `energy` block: its GPU samples files read over the measured window of its records.

The window is the measured requests' span (after --warmup, before --cooldown): the first one's dispatch to the
last one's end, on the clock the samplers share with the client (`vllm-locust run`'s process and the workers
on one host, or NTP across hosts). Called by the master once the load has drained (vllm_users.distributed.run_end).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from vllm_users import run_dir as R
from vllm_users.measure import metric_keys as K
from vllm_users.measure.energy import energy_block
from vllm_users.measure.gpu_samples import GpuSeries, series_of
from vllm_users.measure.metrics import request_spans, rows, sent_rows
from vllm_users.measure.server_counters import read_samples
from vllm_users.measure.windows import parse_optional, split

__all__ = ["gpu_files", "measured_span", "read_gpus", "run_energy"]


def gpu_files(run_dir: str) -> list[str]:
    """The run's --gpu-metrics samples files, in the URLs' order."""
    out = []
    for i in range(10_000):  # bounded: one file per --gpu-metrics URL
        path = R.path(run_dir, R.gpu_metrics_name(i))
        if not os.path.exists(path):
            break
        out.append(path)
    return out


def read_gpus(paths: list[str]) -> tuple[dict[str, GpuSeries], list[str]]:
    """Every GPU's series over the files (a GPU named twice keeps the first file's), and one note per file that
    held no GPU sample."""
    gpus: dict[str, GpuSeries] = {}
    notes = []
    for path in paths:
        samples, _ = read_samples(path)
        found = series_of(samples)
        if not found:
            notes.append(f"{os.path.basename(path)}: no GPU sample")
        for gpu, series in found.items():
            gpus.setdefault(gpu, series)
    return gpus, notes


def measured_span(run_dir: str, meta: Mapping[str, Any]) -> tuple[float, float] | None:
    """The measured requests' first dispatch and last end (epoch s); None without a sent measured request."""
    from vllm_users.measure.records_store import load_columns  # pyarrow: loaded where records are read

    c = load_columns(run_dir)
    measured, _ = split(c, rows(c), parse_optional(meta.get("warmup")), parse_optional(meta.get("cooldown")))
    starts, ends = request_spans(c, sent_rows(c, measured))
    return (float(starts.min()), float(ends.max())) if starts.size else None


def run_energy(
    run_dir: str, meta: Mapping[str, Any], metrics: Mapping[str, Any], energy_price: float | None
) -> dict[str, Any] | None:
    """The result's `energy` block; None when the run has no --gpu-metrics samples file."""
    paths = gpu_files(run_dir)
    if not paths:
        return None
    gpus, notes = read_gpus(paths)
    span = measured_span(run_dir, meta)
    block = energy_block(
        gpus,
        span[0] if span else None,
        span[1] if span else None,
        output_tokens=metrics.get(K.TOTAL_OUTPUT_TOKENS),
        requests=metrics.get(K.COMPLETED),
        energy_price=energy_price,
    )
    if notes:
        block["notes"] = notes
    return block
