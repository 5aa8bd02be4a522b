"""The GPUs while the run goes (master side): the tails of the --gpu-metrics samples files, as the sampler appends
them, for the LLM tab and the live Prometheus export.

Per GPU: its latest power and utilisation, and the energy since the run's first scrape (its counter's increases,
a step back counted from 0 as in vllm_users.measure.energy; without a counter, nothing: the live view integrates
no gauge). The run's figures after the drain are result.json's `energy`, windowed to the measured requests.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from vllm_users import run_dir
from vllm_users.measure.gpu_metric_names import ENERGY, POWER, UTIL

__all__ = ["GpuNow", "GpuTail", "gpu_row", "new_samples"]


@dataclass
class GpuNow:
    """One GPU as of its latest scrape."""

    power_w: float | None = None
    util_pct: float | None = None
    energy_so_far_j: float | None = None  # since the run's first scrape of it
    _last_counter: float | None = field(default=None, repr=False)


def new_samples(path: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The good sample lines a samples file gained after `offset`, and the offset after them (a line being
    written is read next time); none when the file cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    rows = []
    for line in data[:end].splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("v"), dict):
            rows.append(row)
    return rows, offset + end


class GpuTail:
    """Follows gpu_metrics.jsonl, gpu_metrics.1.jsonl, ... in a run directory."""

    def __init__(self, results_dir: str) -> None:
        self.results_dir = results_dir
        self.offsets: dict[str, int] = {}
        self.gpus: dict[str, GpuNow] = {}

    def _paths(self) -> list[str]:
        out = []
        for i in range(10_000):  # bounded: one file per --gpu-metrics URL
            path = run_dir.path(self.results_dir, run_dir.gpu_metrics_name(i))
            if not os.path.exists(path):
                break
            out.append(path)
        return out

    def poll(self) -> dict[str, GpuNow]:
        """Read what the samplers appended since the last poll; every GPU seen so far."""
        seen: set[str] = set()
        for path in self._paths():
            rows, self.offsets[path] = new_samples(path, self.offsets.get(path, 0))
            for row in rows:
                self._take(row["v"], seen)
        return self.gpus

    def _take(self, v: dict[str, Any], seen: set[str]) -> None:
        for key, value in v.items():
            name, _, gpu = key.partition("|")
            if not gpu or not isinstance(value, (int, float)):
                continue
            now = self.gpus.setdefault(gpu, GpuNow())
            if name == POWER:
                now.power_w = float(value)
            elif name == UTIL:
                now.util_pct = float(value)
            elif name == ENERGY:
                if now._last_counter is None:
                    now.energy_so_far_j = 0.0
                else:
                    step = float(value) - now._last_counter
                    now.energy_so_far_j = (now.energy_so_far_j or 0.0) + (step if step >= 0 else float(value))
                now._last_counter = float(value)
            seen.add(gpu)

    def figures(self) -> dict[str, Any] | None:
        """The LLM tab's GPU row: total power, mean utilisation, energy so far, GPUs; None without a GPU."""
        gpus = self.poll()
        if not gpus:
            return None
        powers = [g.power_w for g in gpus.values() if g.power_w is not None]
        utils = [g.util_pct for g in gpus.values() if g.util_pct is not None]
        energies = [g.energy_so_far_j for g in gpus.values()]
        return {
            "gpus": len(gpus),
            "power_w": sum(powers) if len(powers) == len(gpus) else None,
            "util_pct": sum(utils) / len(utils) if utils else None,
            # every GPU's counter, or no figure: a sum over some GPUs would be wrong, not smaller
            "energy_so_far_j": sum(e for e in energies if e is not None) if None not in energies else None,
        }


def gpu_row(tail: GpuTail, output_tokens: Any) -> dict[str, Any] | None:
    """The LLM tab's GPU row with the joules per output token so far (energy since the first scrape over the
    tokens received); None without a GPU."""
    row = tail.figures()
    if row is None:
        return None
    tokens = output_tokens if isinstance(output_tokens, (int, float)) else 0
    energy = row["energy_so_far_j"]
    row["j_per_output_token"] = energy / tokens if energy is not None and tokens > 0 else None
    return row
