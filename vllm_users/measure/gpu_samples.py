"""One GPU exporter scrape as per-GPU fields, and a samples file read back as each GPU's time series.

`parse_gpu_metrics` is the parser the `--gpu-metrics` sampler writes each scrape with (orchestration.server.
metrics_sampler.ServerMetricsSampler, `parse=`): `{"power_w|node-1:0": 312.5, "energy_counter_j|node-1:0": 81234.5, ...}`,
in the fields and units of vllm_users.measure.gpu_metric_names. A GPU is never summed with another here: the
run's sums are taken over the measured window (vllm_users.measure.energy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from vllm_users.measure.gpu_metric_names import FIELDS, GPU_LABELS, HOST_LABELS

__all__ = ["GpuSeries", "gpu_parser", "parse_gpu_metrics", "series_of"]

GpuSeries = dict[str, list[tuple[float, float]]]  # field -> [(t, value)] of one GPU, in time order


def parse_gpu_metrics(text: str, host: str = "") -> dict[str, float]:
    """Prometheus text of a GPU exporter as {"FIELD|HOST:GPU": value}; `host` names GPUs without a host label."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            # prometheus_client names a counter's sample NAME_total when the exporter's TYPE line says counter
            src = FIELDS.get(s.name) or FIELDS.get(s.name.removesuffix("_total"))
            v = float(s.value)
            if src is None or math.isnan(v):
                continue
            node = next((s.labels[k] for k in HOST_LABELS if s.labels.get(k)), host)
            gpu = next((s.labels[k] for k in GPU_LABELS if k in s.labels), "0")
            key = f"{src.field}|{node}:{gpu}"
            if key not in out:  # a name and its older spelling on one exporter: the first one read
                out[key] = v * src.factor
    return out


def gpu_parser(url: str) -> Any:
    """The parser of one --gpu-metrics URL: parse_gpu_metrics naming label-less GPUs by the URL's host:port."""
    host = urlsplit(url).netloc.rpartition("@")[2] or url

    def parse(text: str) -> dict[str, float]:
        return parse_gpu_metrics(text, host)

    return parse


def series_of(samples: Sequence[dict[str, Any]]) -> dict[str, GpuSeries]:
    """The samples of one file as {GPU: {field: [(t, value)]}}, each GPU as "HOST:GPU", in time order."""
    out: dict[str, GpuSeries] = {}
    for s in sorted(samples, key=lambda r: r["t"]):
        for key, v in s["v"].items():
            field, _, gpu = key.partition("|")
            if gpu:
                out.setdefault(gpu, {}).setdefault(field, []).append((float(s["t"]), float(v)))
    return out
