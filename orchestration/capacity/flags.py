"""The capacity-planning flags of `vllm-locust run` (issue 14): repeats, sweeps, the SLO search, cost, profiling."""

from __future__ import annotations

import argparse

from orchestration import config as C


def add_flags(p: argparse.ArgumentParser) -> None:
    """Register the capacity flags on the `run` parser."""
    p.add_argument("--ramp-up-strategy", choices=["linear", "exponential"], default=None,
                   help="Open loop: ramp the rate from --ramp-up-start-rps to --ramp-up-end-rps over --num-prompts "
                   "requests, as vllm bench serve does")  # fmt: skip
    p.add_argument("--ramp-up-start-rps", type=C.pos_float, default=None, help="Ramp: rate of the first request")
    p.add_argument("--ramp-up-end-rps", type=C.pos_float, default=None, help="Ramp: rate of the last request")
    p.add_argument("--repeats", type=C.pos_int, default=1, metavar="N",
                   help="Run N times (one directory each): every metric's mean and 95 %% CI; compare with `report A B`")  # fmt: skip


def validate(a: argparse.Namespace) -> None:
    """Cross-flag checks of the capacity flags; UsageError with one line."""
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


def locust_args(a: argparse.Namespace) -> list[str]:
    """What the Locust master and workers need of the capacity flags."""
    if a.ramp_up_strategy is None:
        return []
    return ["--ramp-up-strategy", a.ramp_up_strategy, "--ramp-up-start-rps", str(a.ramp_up_start_rps),
            "--ramp-up-end-rps", str(a.ramp_up_end_rps)]  # fmt: skip
