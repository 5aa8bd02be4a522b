"""The measurement option group: SLOs, windows, percentiles, timeouts."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_users import option_types as T
from vllm_users.measure.metrics import (
    DEFAULT_METRIC_PERCENTILES,
    DEFAULT_PERCENTILE_METRICS,
    Slo,
    parse_metric_percentiles,
    parse_percentile_metrics,
)
from vllm_users.measure.windows import Window
from vllm_users.option_spec import BOTH, opt

__all__ = ["MeasureOptions", "goodput", "metric_percentiles", "percentile_metrics", "window"]


# the group's value parsers live here, beside the measure code they call: option_types stands below measure/
def goodput(value: str) -> str:
    """Validate `ttft:MS tpot:MS e2el:MS` now, keep the text ("" = none)."""
    if not value.strip():
        return ""
    try:
        Slo.parse([value])
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def window(value: str) -> str:
    """Validate a warm-up/cool-down window (30s, 2m, 200r), keep the text ("" = none)."""
    if not value.strip():
        return ""
    try:
        Window.parse(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value.strip()


def _checked_by(parse: Callable[[str], Any], name: str) -> Callable[[str], str]:
    """A parser that validates the text with `parse` (ValueError "--flag 'text': why") and keeps it."""

    def check(value: str) -> str:
        try:
            parse(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e).partition(": ")[2]) from None
        return value

    check.__name__ = name
    return check


percentile_metrics = _checked_by(parse_percentile_metrics, "percentile_metrics")  # vLLM's: ttft,tpot,itl,e2el
metric_percentiles = _checked_by(
    parse_metric_percentiles, "metric_percentiles"
)  # vLLM's: numbers in (0, 100]


@dataclass(frozen=True)
class MeasureOptions:
    """What is measured and how: SLOs, windows, percentiles, timeouts."""

    goodput: str = opt(
        "",
        goodput,
        "SLOs: ttft:MS tpot:MS e2el:MS; add `valid` to count a wrong answer (json, "
        "tools, a check hook) as a miss",
        *BOTH,
        many=True,
    )
    warmup: str = opt(
        "",
        window,
        "Requests in the first 30 s (or the first 200) are kept in the records but left "
        "out of the statistics",
        *BOTH,
        metavar="30s|200r",
    )
    cooldown: str = opt(
        "",
        window,
        "Requests that end in the last 30 s (or the last 200) are left out of the statistics",
        *BOTH,
        metavar="30s|200r",
    )
    percentile_metrics: str = opt(
        ",".join(DEFAULT_PERCENTILE_METRICS),
        percentile_metrics,
        "Metrics whose percentiles the result reports (vLLM's): any of ttft,tpot,itl,e2el",
        *BOTH,
    )
    metric_percentiles: str = opt(
        ",".join(f"{p:g}" for p in DEFAULT_METRIC_PERCENTILES),
        metric_percentiles,
        'Percentiles reported for those metrics (vLLM\'s), e.g. "50,90,99,99.9"',
        *BOTH,
    )
    stop_timeout: float = opt(
        30.0,
        T.nonneg_float,
        "Seconds in-flight streams get to finish at stop",
        *BOTH,
        locust_name="vllm_stop_timeout",
    )
    stream_timeout: float = opt(
        120.0,
        T.pos_float,
        "Read timeout per recv of a stream, seconds (any byte resets it, a keep-alive `: ping` too)",
        *BOTH,
    )
    request_timeout: float = opt(
        600.0,
        T.nonneg_float,
        "Seconds a whole request may take, headers to the last byte; past it the request fails as "
        "request_timeout with the tokens so far (0: no bound)",
        *BOTH,
    )
    stall_timeout: float = opt(
        120.0,
        T.nonneg_float,
        "Seconds a stream may go without an output chunk (from the send to the first, then between "
        "two; comments, pings and empty events do not count); past it the request fails as stall_timeout "
        "with the tokens so far (0: no bound)",
        *BOTH,
    )
    fail_on_client_bound: bool = opt(
        False,
        None,
        "Exit 5 when the load generator was the bottleneck (default: flag it in the result only)",
        *BOTH,
    )
    records_at_end: bool = opt(
        False,
        None,
        "Workers send histograms and counters every second but keep their "
        "records on disk; the master collects the record files at the end (past one "
        "master's ingest ceiling, docs/scale.md)",
        *BOTH,
    )
