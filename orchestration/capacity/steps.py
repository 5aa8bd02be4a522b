"""What repeats, sweeps and the SLO search share: how one run is called (RunOne), one server for every step, a
step's arguments, its result."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from orchestration import config as C
from vllm_users.atomic import atomic_json
from vllm_users.measure.run_result import load_result
from vllm_users.options import Options
from vllm_users.run_dir import REPEATS, read_json

__all__ = ["REPEAT_STRIDE", "STEP_STRIDE", "RunOne", "parent_dir", "read_step", "shared_host", "step_args", "step_seed", "write_output_file"]

RunOne = Callable[..., int]  # commands.run.run: one run of these options (a step's `watch` may stop it early)

# Settings that a step takes over from the parent and must not inherit (the parent's own job).
# --repeats is not among them: a sweep or search step with --repeats N is itself repeated.
_PARENT_ONLY = {"sweep": "", "find_max_rate": False, "concurrency_sweep": "", "output_file": ""}


@contextmanager
def shared_host(a: Options) -> Iterator[str]:
    """The server every step talks to: --host, or one embedded simulator started for all steps."""
    if a.host:
        yield a.host
        return
    from vllm_sim.launch import start_simulator

    sim = start_simulator(a.sim_args.split() if a.sim_args else [])
    try:
        yield sim.url
    finally:
        sim.stop()


def parent_dir(a: Options, kind: str, marker: str) -> str:
    """The directory holding every step (created); UsageError when it already holds `marker`."""
    path = os.path.join(a.output_dir, a.run_name or f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}")
    if os.path.exists(os.path.join(path, marker)):
        raise C.UsageError(f"{path} already holds a {kind}; choose another --run-name")
    os.makedirs(path, exist_ok=True)
    return path


def step_args(a: Options, host: str, out_dir: str, name: str, **overrides: Any) -> Options:
    """A copy of `a` for one step: its own run directory, the shared host, `overrides` applied."""
    return dataclasses.replace(a, **{**_PARENT_ONLY, "host": host, "output_dir": out_dir, "run_name": name,
                                     "no_report": True, **overrides})  # fmt: skip


REPEAT_STRIDE, STEP_STRIDE = 1, 1000  # a sweep's step k may itself be repeated: its repeats take k*1000 + 0, 1, ...


def step_seed(a: Options, k: int, stride: int = STEP_STRIDE) -> int:
    """The --seed of the k-th step (k = 0, 1, ...) of a search or sweep (stride STEP_STRIDE), or of the k-th
    repeat (stride REPEAT_STRIDE), against one server.

    Each step draws its own prompts (and arrivals): with the parent's seed every step would resend the first
    step's prompts, and a server with prefix caching (vLLM's default) would answer the later steps from its
    cache (the second of two repeats hit 95 % of its prompt tokens; its TTFT read 16 ms against 41 ms). The
    seeds are fixed offsets, so a search or a sweep is as reproducible as one run. `sweep-server` keeps the
    parent's seed: each configuration is a fresh server, and the same prompts make the configurations paired."""
    return int(a.seed) + k * stride


def read_step(run_dir: str) -> dict[str, Any]:
    """A step's result: result.json, or for a repeated step the repeats' means (with their CIs under `repeats`)."""
    try:
        if os.path.exists(os.path.join(run_dir, REPEATS)):
            doc = read_json(run_dir, REPEATS)
            res: dict[str, Any] = {k: m["mean"] for k, m in doc["metrics"].items()}
            res["repeats"] = doc
            return res
    except (OSError, ValueError, KeyError):
        return {}
    written = load_result(run_dir)
    return written.to_json() if written is not None else {}


def write_output_file(a: Options, doc: dict[str, Any]) -> None:
    """--output-file of a multi-run mode: its summary document (repeats.json's or sweep.json's), when asked."""
    if a.output_file:
        os.makedirs(os.path.dirname(os.path.abspath(a.output_file)), exist_ok=True)
        atomic_json(a.output_file, doc)
