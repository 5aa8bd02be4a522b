"""Cross-checks of the capacity-planning options of `vllm-locust run` (declared in vllm_users.options): repeats,
sweeps, the SLO search, cost, profiling."""

from __future__ import annotations

import argparse

from orchestration import config as C


def validate(a: argparse.Namespace) -> None:
    """Cross-flag checks of the capacity flags; UsageError with one line."""
    if a.concurrency_sweep:  # the older flag is a concurrency sweep
        if a.sweep:
            raise C.UsageError("--concurrency-sweep is --sweep concurrency:...: give one of them")
        a.sweep = "concurrency:" + a.concurrency_sweep
        a.concurrency_sweep = ""
    if a.find_max_rate:
        if not a.goodput:
            raise C.UsageError("--find-max-rate needs the SLO: --goodput ttft:MS tpot:MS [e2el:MS]")
        if a.users is not None or a.request_rate is not None or a.sweep or a.ramp_up_strategy:
            raise C.UsageError("--find-max-rate chooses the rates itself: leave out --users, --request-rate, --sweep "
                               "and --ramp-up-strategy")  # fmt: skip
    if a.sweep:
        from orchestration.capacity.sweep import parse_sweep

        parse_sweep(a.sweep)  # a bad value is a usage error before anything starts
    if vars(a).get("_capacity_validated"):  # a repeat or sweep step of an already checked run
        return
    a._capacity_validated = True
    if a.ramp_up_strategy is not None:
        if a.ramp_up_start_rps is None or a.ramp_up_end_rps is None:
            raise C.UsageError("--ramp-up-strategy needs --ramp-up-start-rps and --ramp-up-end-rps")
        if a.ramp_up_start_rps > a.ramp_up_end_rps:
            raise C.UsageError("--ramp-up-start-rps must not exceed --ramp-up-end-rps")
        if a.request_rate is not None or a.users is not None:
            raise C.UsageError("--ramp-up-strategy sets the rate: leave out --request-rate and --users")
        if a.num_prompts is None:
            raise C.UsageError("--ramp-up-strategy ramps over --num-prompts requests: give --num-prompts")
        a.request_rate = a.ramp_up_end_rps  # open loop, at most this fast
    elif a.ramp_up_start_rps is not None or a.ramp_up_end_rps is not None:
        raise C.UsageError("--ramp-up-start-rps/--ramp-up-end-rps need --ramp-up-strategy linear|exponential")
