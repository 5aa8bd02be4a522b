"""`--gpu-metrics URL`: one sampler per GPU exporter on the run's time axis, and the preflight's line about each.

The sampler is the server's (orchestration.server.metrics_sampler.ServerMetricsSampler) with the GPU parser
(vllm_users.measure.gpu_samples), writing gpu_metrics.jsonl (gpu_metrics.N.jsonl for the N-th further URL). Its
first scrape, before the load, is the preflight: an exporter that cannot be reached or serves no GPU field is
named in one line, and the run goes on without GPU figures (its result's `energy` block says why).
"""

from __future__ import annotations

from orchestration.server.metrics_sampler import ServerMetricsSampler
from vllm_users import run_dir as R
from vllm_users.measure.gpu_options import GpuOptions
from vllm_users.measure.gpu_samples import gpu_parser

__all__ = ["gpu_samplers", "preflight_line"]


def gpu_samplers(a: GpuOptions, run_dir: str) -> tuple[list[ServerMetricsSampler], list[str]]:
    """Start a sampler for each --gpu-metrics URL (in its order); the samplers and the preflight's lines."""
    samplers, lines = [], []
    for i, url in enumerate(dict.fromkeys(u for u in a.gpu_metrics if u)):
        sampler = ServerMetricsSampler(
            url, R.path(run_dir, R.gpu_metrics_name(i)), parse=gpu_parser(url), what="gpu metrics"
        )
        sampler.start()
        samplers.append(sampler)
        line = preflight_line(sampler)
        if line:
            lines.append(line)
    return samplers, lines


def preflight_line(sampler: ServerMetricsSampler) -> str | None:
    """One line when the exporter's first scrape failed or held no GPU field; None when it serves GPUs."""
    first = sampler.baseline or {}
    if "error" in first:
        why = f"cannot be reached ({first['error']})"
    elif not first.get("v"):
        why = "serves no GPU field (DCGM_FI_DEV_*, GPU_*: docs/energy.md)"
    else:
        return None
    return f"gpu metrics: {sampler.url} {why}; the run goes on without its GPU figures"
