"""One probe phase against a simulator started for it: the raw points it recorded (the API-stage tests' fixtures)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from orchestration.twin.phases import ProbePlan, new_raw, warmup
from orchestration.twin.probe import Budget, Probe
from vllm_sim.launch import start_simulator


def probed(
    sim_args: list[str], phase: Callable[[Probe, ProbePlan, dict[str, Any]], None], plan: ProbePlan
) -> Iterator[dict[str, Any]]:
    """Start the simulator with `sim_args`, warm it up, run `phase` with `plan`, yield the raw points; stop it."""
    sim = start_simulator(sim_args, timeout=20)
    try:
        probe = Probe(sim.url, "sim-model", Budget(60.0))
        raw = new_raw()
        warmup(probe, raw)
        phase(probe, plan, raw)
        yield raw
    finally:
        sim.stop()
