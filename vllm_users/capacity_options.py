"""The capacity-planning option group (`vllm-locust run`: sweeps, the max-rate search, cost, repeats) and its own
rules: what orchestration.capacity runs, declared and checked here (vllm_users never imports orchestration)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.errors import UsageError
from vllm_users.option_spec import BOTH, RUN, opt

__all__ = ["AUTO_RATES", "CapacityOptions", "SweepPlan", "parse_sweep"]

AUTO_RATES = 5  # `--sweep auto`: rates between synchronous and throughput


@dataclass(frozen=True)
class SweepPlan:
    """What to sweep: kind 'rates' | 'concurrency' | 'auto', and its values (auto: how many rates between)."""

    kind: str
    values: tuple[float, ...]


def parse_sweep(text: str) -> SweepPlan:
    """`rates:1,2,4` / `concurrency:1,8,32` / `auto` / `auto:8`; UsageError naming the text otherwise."""
    kind, _, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    want = "expected rates:1,2,4,8, concurrency:1,8,32 or auto[:N]"
    try:
        if kind == "auto":
            n = int(rest) if rest.strip() else AUTO_RATES
            if n < 1:
                raise ValueError
            return SweepPlan("auto", (float(n),))
        if kind in ("rates", "rate", "concurrency"):
            vals = [float(x) for x in rest.split(",") if x.strip()]
            if not vals or any(not v > 0 or math.isnan(v) for v in vals):
                raise ValueError
            if kind == "concurrency" and any(v != int(v) for v in vals):
                raise ValueError
            return SweepPlan("rates" if kind.startswith("rate") else "concurrency", tuple(vals))
    except ValueError:
        pass
    raise UsageError(f"--sweep {text!r}: {want}")


@dataclass(frozen=True)
class CapacityOptions:
    """Capacity planning (run): sweeps, the max-rate search, cost, repeats."""

    concurrency_sweep: str = opt(
        "", T.text, "Run once per concurrency, e.g. 1,2,4,8 (= --sweep concurrency:...)", RUN
    )
    sweep: str = opt(
        "",
        T.text,
        "One run per step (a run directory each) and one report with latency-vs-rate "
        "curves; auto = synchronous, throughput, then 5 rates between (auto:N for N)",
        RUN,
        metavar="rates:1,2,4|concurrency:1,8,32|auto",
    )
    find_max_rate: bool = opt(
        False,
        None,
        "Search the highest open-loop rate at which the --goodput SLO holds (a probe, then bisection)",
        RUN,
    )
    slo_percentile: float = opt(
        99.0,
        T.percentile,
        "--find-max-rate (and a --sweep with --goodput): the percentile of each SLO metric that must be within "
        "its limit",
        RUN,
    )
    max_error_rate: float = opt(
        0.01,
        T.fraction,
        "--find-max-rate (and a --sweep with --goodput): most failures a passing step may have, as a fraction",
        RUN,
    )
    search_steps: int = opt(8, T.pos_int, "--find-max-rate: most steps, the probe included", RUN)
    search_tolerance: float = opt(
        0.025,
        T.pos_float,
        "--find-max-rate: stop when the passing and failing rates are this close (relative)",
        RUN,
    )
    gpu_hour_price: float | None = opt(
        None,
        T.pos_float,
        "Price of one GPU-hour: adds $ per million output tokens and $ per request",
        *BOTH,
        metavar="USD",
        web_ui=False,
    )
    gpus: int = opt(1, T.pos_int, "GPUs the deployment uses (with --gpu-hour-price)", *BOTH, web_ui=False)
    profile: bool = opt(
        False,
        None,
        "POST the server's /start_profile and /stop_profile around the load (vLLM with --profiler-config)",
        *BOTH,
        locust_name="vllm_profile",
        web_ui=False,
    )
    repeats: int = opt(
        1,
        T.pos_int,
        "Run N times (one directory each): every metric's mean and 95 % CI; compare with `report A B`",
        RUN,
        metavar="N",
    )

    def check(self) -> None:
        """The capacity options' own rules (UsageError with one line): --concurrency-sweep is the older
        spelling of --sweep concurrency:..., so not both; a --sweep must parse before anything starts."""
        if self.concurrency_sweep and self.sweep:
            raise UsageError("--concurrency-sweep is --sweep concurrency:...: give one of them")
        if self.sweep:
            parse_sweep(self.sweep)
