"""The measurement option group: SLOs, windows, percentiles, timeouts."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_users import option_types as T
from vllm_users.measure.metrics import DEFAULT_METRIC_PERCENTILES, DEFAULT_PERCENTILE_METRICS
from vllm_users.option_spec import BOTH, opt


@dataclass(frozen=True)
class MeasureOptions:
    """What is measured and how: SLOs, windows, percentiles, timeouts."""

    goodput: str = opt(
        "",
        T.goodput,
        "SLOs: ttft:MS tpot:MS e2el:MS; add `valid` to count a wrong answer (json, "
        "tools, a check hook) as a miss",
        *BOTH,
        many=True,
    )
    warmup: str = opt(
        "",
        T.window,
        "Requests in the first 30 s (or the first 200) are kept in the records but left "
        "out of the statistics",
        *BOTH,
        metavar="30s|200r",
    )
    cooldown: str = opt(
        "",
        T.window,
        "Requests that end in the last 30 s (or the last 200) are left out of the statistics",
        *BOTH,
        metavar="30s|200r",
    )
    percentile_metrics: str = opt(
        ",".join(DEFAULT_PERCENTILE_METRICS),
        T.percentile_metrics,
        "Metrics whose percentiles the result reports (vLLM's): any of ttft,tpot,itl,e2el",
        *BOTH,
    )
    metric_percentiles: str = opt(
        ",".join(f"{p:g}" for p in DEFAULT_METRIC_PERCENTILES),
        T.metric_percentiles,
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
    stream_timeout: float = opt(120.0, T.pos_float, "Read timeout per recv of a stream, seconds", *BOTH)
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
