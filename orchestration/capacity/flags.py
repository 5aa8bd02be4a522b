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
    p.add_argument("--sweep", default=None, metavar="rates:1,2,4|concurrency:1,8,32|auto",
                   help="One run per step (a run directory each) and one report with latency-vs-rate curves; "
                   "auto = synchronous, throughput, then 5 rates between (auto:N for N)")  # fmt: skip
    p.add_argument("--find-max-rate", action="store_true",
                   help="Search the highest open-loop rate at which the --goodput SLO holds (a probe, then bisection)")
    p.add_argument("--slo-percentile", type=_percentile, default=99.0,
                   help="--find-max-rate: the percentile of each SLO metric that must be within its limit (default 99)")
    p.add_argument("--max-error-rate", type=C.fraction, default=0.01,
                   help="--find-max-rate: most failures a passing rate may have, as a fraction (default 0.01)")
    p.add_argument("--search-steps", type=C.pos_int, default=8, help="--find-max-rate: most steps, the probe included")
    p.add_argument("--search-tolerance", type=C.pos_float, default=0.025,
                   help="--find-max-rate: stop when the passing and failing rates are this close (relative)")
    p.add_argument("--gpu-hour-price", type=C.pos_float, default=None, metavar="USD",
                   help="Price of one GPU-hour: adds $ per million output tokens and $ per request")
    p.add_argument("--gpus", type=C.pos_int, default=1, help="GPUs the deployment uses (with --gpu-hour-price)")
    p.add_argument("--profile", action="store_true",
                   help="POST the server's /start_profile and /stop_profile around the load (vLLM with --profiler-config)")
    p.add_argument("--repeats", type=C.pos_int, default=1, metavar="N",
                   help="Run N times (one directory each): every metric's mean and 95 %% CI; compare with `report A B`")  # fmt: skip


def _percentile(text: str) -> float:
    v = C.pos_float(text)
    if not v < 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentile in (0, 100)")
    return float(v)


def validate(a: argparse.Namespace) -> None:
    """Cross-flag checks of the capacity flags; UsageError with one line."""
    if getattr(a, "concurrency_sweep", None):  # the older flag is a concurrency sweep
        if getattr(a, "sweep", None):
            raise C.UsageError("--concurrency-sweep is --sweep concurrency:...: give one of them")
        a.sweep = "concurrency:" + a.concurrency_sweep
        a.concurrency_sweep = None
    if getattr(a, "find_max_rate", False):
        if not a.goodput:
            raise C.UsageError("--find-max-rate needs the SLO: --goodput ttft:MS tpot:MS [e2el:MS]")
        if a.users is not None or a.request_rate is not None or getattr(a, "sweep", None) or a.ramp_up_strategy:
            raise C.UsageError("--find-max-rate chooses the rates itself: leave out --users, --request-rate, --sweep "
                               "and --ramp-up-strategy")  # fmt: skip
    if getattr(a, "sweep", None):
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


def locust_args(a: argparse.Namespace) -> list[str]:
    """What the Locust master and workers need of the capacity flags."""
    if a.ramp_up_strategy is None:
        return []
    return ["--ramp-up-strategy", a.ramp_up_strategy, "--ramp-up-start-rps", str(a.ramp_up_start_rps),
            "--ramp-up-end-rps", str(a.ramp_up_end_rps)]  # fmt: skip
