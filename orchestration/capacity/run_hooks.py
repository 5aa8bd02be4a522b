"""Where the capacity features meet `vllm-locust run`: the multi-run modes, --profile around the load, and the
result fields they add (profile, cost). run_cmd calls these; the logic lives in the modules they name."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from orchestration.capacity.flags import validate as capacity_validate
from vllm_users.options import Options

RunOne = Callable[..., int]  # run_cmd.run: one run of these options (a step's `watch` may stop it early)

PROFILE_FILE = "profile.json"


def multi_run(o: Options, run_one: RunOne, validate: Callable[[Options], Options]) -> int | None:
    """Run --find-max-rate, --sweep/--concurrency-sweep or --repeats when asked (their exit code); else None."""
    if o.find_max_rate:
        from orchestration.capacity.search import run_search

        return run_search(capacity_validate(o), run_one)
    if o.sweep or o.concurrency_sweep:
        from orchestration.capacity.sweep import run_sweep

        return run_sweep(capacity_validate(o), run_one)
    if o.repeats > 1:
        from orchestration.capacity.repeats import run_repeats

        return run_repeats(validate(o), run_one)
    return None


def start_profile(a: Options, host: str, api_key: str | None) -> Any:
    """--profile: the server's profiler started (after a time-based --warmup); None without --profile."""
    if not a.profile:
        return None
    from orchestration.capacity.profile import ServerProfile
    from vllm_users.measure.windows import parse_optional

    warm = parse_optional(a.warmup)
    profile = ServerProfile(host, api_key, delay_s=(warm.seconds or 0.0) if warm else 0.0)
    profile.start()
    return profile


def stop_profile(profile: Any, run_dir: str) -> str | None:
    """Stop the profiler, keep what happened in RUN/profile.json; a line for the console (None without one)."""
    if profile is None:
        return None
    from vllm_users.atomic import atomic_json

    info = profile.stop()
    atomic_json(os.path.join(run_dir, PROFILE_FILE), info)
    return "server profile: " + ("traces written by the server" if info["profiled"] else str(info.get("error", "?")))


def add_result_fields(a: Options, run_dir: str, res: dict[str, Any]) -> bool:
    """The result's `profile` and `cost` blocks; True when `res` changed."""
    changed = False
    path = os.path.join(run_dir, PROFILE_FILE)
    if os.path.exists(path):
        with open(path) as fh:
            res["profile"] = json.load(fh)
        changed = True
    if a.gpu_hour_price:
        from orchestration.capacity.cost import run_cost

        res["cost"] = run_cost(res, a.gpu_hour_price, a.gpus)
        changed = True
    return changed
