"""Where the capacity features meet `vllm-locust run`: the multi-run modes (commands.run calls this; the logic lives in
the modules it names). --profile and --gpu-hour-price act in the master (vllm_users.distributed.run_end)."""

from __future__ import annotations

from collections.abc import Callable

from orchestration.capacity.flags import settle
from orchestration.capacity.steps import RunOne
from vllm_users.options import Options

__all__ = ["RunOne", "multi_run"]


def multi_run(o: Options, run_one: RunOne, validate: Callable[[Options], Options]) -> int | None:
    """Run --find-max-rate, --sweep/--concurrency-sweep or --repeats when asked (their exit code); else None."""
    if o.capacity.find_max_rate:
        from orchestration.capacity.search import run_search

        return run_search(settle(o), run_one)
    if o.capacity.sweep or o.capacity.concurrency_sweep:
        from orchestration.capacity.sweep import run_sweep

        return run_sweep(settle(o), run_one)
    if o.capacity.repeats > 1:
        from orchestration.capacity.repeats import run_repeats

        return run_repeats(validate(o), run_one)
    return None
