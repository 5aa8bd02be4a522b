"""The GPU option group: `--gpu-metrics URL` (a GPU exporter scraped on the run's time axis) and `--energy-price`."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.option_spec import BOTH, RUN, opt

__all__ = ["GpuOptions"]


@dataclass(frozen=True)
class GpuOptions:
    """The GPUs' own view (docs/energy.md): power, energy, utilisation, memory, clocks, throttling."""

    gpu_metrics: tuple[str, ...] = opt(
        (),
        T.text,
        "A GPU exporter's Prometheus endpoint (DCGM exporter, AMD device-metrics exporter, `vllm-locust "
        "gpu-exporter`), sampled every 2 s: energy, power, utilisation, throttling over the measured window; "
        "repeatable: one per node",
        RUN,
        repeat=True,
        metavar="URL",
    )
    energy_price: float | None = opt(
        None,
        T.pos_float,
        "Price of one kWh (with --gpu-metrics): the run's energy in $ and $ per million output tokens",
        *BOTH,
        metavar="USD",
        web_ui=False,
    )
