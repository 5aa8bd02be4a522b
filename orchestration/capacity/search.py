"""`--find-max-rate`: the highest open-loop request rate at which the SLO holds (`--goodput`, `--slo-percentile`,
`--max-error-rate`).

A step is one bounded open-loop run at a rate. It holds when: the failure rate is at most --max-error-rate,
the --slo-percentile of every SLO metric is within its limit (measured window), and the server kept up:
- the achieved rate >= 90 % of the rate the step's arrivals offered, both over the step's interior (the arrivals
  between its first and last tenth; the completions in that window shifted by the median latency): a short
  Poisson step's own rate is +-18 % off the target, and at its edges requests can only cross out of a window;
- the TTFT does not trend up (median of the last third of the requests <= 1.5 x the first third's + 5 ms);
- the server queue (vllm:num_requests_waiting) does not grow over the step;
- the step was not stopped early: while it runs, completions falling behind arrivals beyond what Little's law
  allows (SaturationWatch: the requests sent over a mean latency ago and still in flight, two progress samples in
  a row), or a live TTFT median above 3 x its SLO after 50 requests, end it at once (over-saturated or already
  failed).
A step whose load generator fell behind its schedule (> 5 % of arrivals sent more than half a mean gap late)
measured the client, not the server: it is "invalid" and run once more.

Search: a throughput probe (every request at once) measures capacity C; C is tried first; after a failure
with no passing rate yet, 0.9 x, then halves; once a passing and a failing rate bracket the maximum, bisection
until they are within --search-tolerance of each other or --search-steps are used. The answer is the highest
passing rate, with the bracket [pass, fail) as the search's resolution and, beside it, the range a second search
falls into (orchestration/capacity/search_range.py: each step's SLO percentile with its order-statistic interval).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from orchestration.capacity.cost import add_step_costs
from orchestration.capacity.saturation import SaturationWatch
from orchestration.capacity.search_range import search_range, slo_intervals
from orchestration.capacity.search_table import format_search
from orchestration.capacity.steps import (
    CONSOLE,
    SEARCH_STEPS,
    RunOne,
    StepRunner,
    shared_host,
    summarize_step,
    write_output_file,
)
from orchestration.settings import config as C
from vllm_users import exit_codes
from vllm_users.atomic import atomic_json
from vllm_users.distributed.options import LoadOptions
from vllm_users.measure import metric_keys as K
from vllm_users.measure.cost import cost_at, format_cost
from vllm_users.measure.metrics import Slo
from vllm_users.options import Options
from vllm_users.redact import redact_url
from vllm_users.run_dir import EARLY_STOP, META, SERVER_METRICS, SWEEP, read_json

__all__ = ["SaturationWatch", "judge", "next_rate", "run_search"]

STEP_SECONDS = 10.0  # a step sends rate x 10 s requests...
STEP_MIN, STEP_MAX = 30, 300  # ...at least 30, at most 300
PROBE_REQUESTS = 200
ACHIEVED_MIN = 0.90
TTFT_TREND_RATIO, TTFT_TREND_MS = 1.5, 5.0
FIRST_RETRY = 0.9  # after the first failure with no pass: try 90 % of it (SLOs usually bind near capacity)
SATURATED_RETRY = 0.97  # ...or just under the completion rate an over-saturated step kept up
LATE_MAX = 0.05  # more arrivals late by half a gap than this: the step is invalid and run once more


# ------------------------------------------------------------------------------------- a step's verdict
def _measured(run_dir: str, percentile: float) -> tuple[dict[str, Any], Any, np.ndarray]:
    """The step's result at `percentile` (measured window), its columns and the measured successes' rows."""
    from vllm_users.measure.metrics import METRICS, PercentileChoice, ok_rows
    from vllm_users.measure.records_store import load_columns
    from vllm_users.measure.result_builder import build_result
    from vllm_users.measure.windows import parse_optional, split

    meta = read_json(run_dir, META)
    cols = load_columns(run_dir)
    res = build_result(cols, meta, percentiles=PercentileChoice(METRICS, (50.0, percentile)))
    measured, _ = split(
        cols, np.arange(cols.n), parse_optional(meta.get("warmup")), parse_optional(meta.get("cooldown"))
    )
    return res, cols, ok_rows(cols, measured)


def _queue_growing(run_dir: str) -> str | None:
    from orchestration.server.metrics_sampler import WAITING, read_samples

    path = os.path.join(run_dir, SERVER_METRICS)
    if not os.path.exists(path):
        return None
    samples, _ = read_samples(path)
    waiting = [s["v"][WAITING] for s in samples if WAITING in s.get("v", {})]
    if len(waiting) < 3:
        return None
    third = max(1, len(waiting) // 3)
    first, last = float(np.mean(waiting[:third])), float(np.mean(waiting[-third:]))
    if last >= first + 2 and waiting[-1] >= 2 and waiting[-1] >= max(waiting[:third]) + 2:
        return f"server queue grew from {first:.1f} to {last:.1f} waiting requests"
    return None


def _late_fraction(cols: Any, target: float) -> float | None:
    """Arrivals sent later than half a mean gap (and 10 ms) after their intended time: bunching the server saw
    (None: no arrival had a schedule)."""
    from vllm_users.measure.metrics import LATE_THRESHOLD_S, rows, sent_rows

    sent = sent_rows(cols, rows(cols))
    ti = cols.a["t_intended"][sent]
    keep = ~np.isnan(ti)
    if not keep.any():
        return None
    lag = cols.a["t_start"][sent][keep] - ti[keep]
    return float(np.mean(lag > max(LATE_THRESHOLD_S, 0.5 / target)))


def _kept_up(sched: np.ndarray, ends: np.ndarray) -> tuple[float, float] | None:
    """(achieved, offered) req/s over the step's interior: the arrivals between its first and last tenth (their
    intended starts), and the completions in the same window shifted by the median latency; None when too short.

    Against the target, a short Poisson step failed "achieved >= 90 %" by its own luck: 30 arrivals put the
    realized rate within about +-18 % of the target (1 / sqrt(30)). Over the whole step, requests at its edges
    could only cross out of the window, never in: of 30, the first one (answered faster than the median) and the
    last two (slower) fell out, and a twin that answered every request in 160-250 ms "achieved" 1.38 of 1.54
    req/s. In the interior a request crosses in as often as one crosses out; only the server's lag counts."""
    s = np.sort(sched)
    n = s.size
    k = max(1, n // 10)
    # the window's edges half-way between arrivals, not on one: an arrival on the edge would count whole among
    # the offered and be answered inside the window only half the time (one request short on average)
    a, b = float(s[k - 1] + s[k]) / 2, float(s[n - 1 - k] + s[n - k]) / 2
    if b <= a:
        return None
    lag = float(np.median(ends - sched))
    done = int(((ends >= a + lag) & (ends <= b + lag)).sum())
    return done / (b - a), (n - 2 * k) / (b - a)


def judge(run_dir: str, target: float, slo: Slo, percentile: float, max_error_rate: float) -> dict[str, Any]:
    """Whether the step at `target` req/s held the SLO, with every reason it did not."""
    reasons: list[str] = []
    try:
        reasons.append("stopped early: " + read_json(run_dir, EARLY_STOP)["reason"])
    except (OSError, ValueError, KeyError):
        pass
    try:
        res, cols, ok = _measured(run_dir, percentile)
    except (OSError, ValueError, KeyError) as e:
        return {"passed": False, "reasons": reasons + [f"no result ({type(e).__name__})"]}
    from vllm_users.measure.metric_keys import percentile_name

    pname = percentile_name(percentile)
    total = res[K.COMPLETED] + res[K.FAILED]
    err = res[K.FAILED] / total if total else 1.0
    if err > max_error_rate:
        reasons.append(f"failure rate {err:.1%} > {max_error_rate:.1%}")
    values = {}
    for m, lim in slo.limits_ms.items():
        v = res.get(f"{pname}_{m}_ms")
        values[m] = v
        if v is None or v > lim:
            reasons.append(
                f"{pname} {m.upper()} {v:.1f} ms > {lim:g} ms" if v is not None else f"no {m} samples"
            )
    from vllm_users.measure.per_class import class_misses

    missed = class_misses(res.get("classes"), pname)  # traffic classes: each against its own SLO
    reasons += [f"class {name}: {why}" for name, why in missed]
    achieved = offered = None
    if ok.size >= 10:
        starts = cols.a["t_start"][ok]
        ends = starts + cols.a["end_us"][ok] / 1e6
        intended = cols.a["t_intended"][ok]
        sched = np.where(
            np.isnan(intended), starts, intended
        )  # closed-loop rows have no schedule: their starts
        rates = _kept_up(sched, ends)
        if rates is not None:
            achieved, offered = rates
            if achieved < ACHIEVED_MIN * offered:
                reasons.append(
                    f"achieved {achieved:.2f} req/s < {ACHIEVED_MIN:.0%} of the offered {offered:.2f} "
                    f"(target {target:g})"
                )
        order = np.argsort(starts)
        ttft = cols.first_chunk(ok)[order] / 1e3
        third = ttft.size // 3
        first, last = float(np.median(ttft[:third])), float(np.median(ttft[-third:]))
        if last > TTFT_TREND_RATIO * first + TTFT_TREND_MS:
            reasons.append(
                f"TTFT rising: median {first:.1f} ms in the first third, {last:.1f} ms in the last"
            )
    q = _queue_growing(run_dir)
    if q:
        reasons.append(q)
    from vllm_users.measure.metrics import metric_arrays

    samples_ms = {m: v * 1e3 for m, v in metric_arrays(cols, ok).items() if m in slo.limits_ms}
    measured = {
        "error_rate": err,
        "slo_values_ms": values,
        "slo_ci_ms": slo_intervals(samples_ms, slo.limits_ms, percentile),
        "percentile": pname,
        "achieved_completion_rate": achieved,
        "offered_rate": offered,
    }
    late = _late_fraction(cols, target)
    if late is not None:
        measured["on_schedule"] = 1.0 - late  # the arrivals sent on schedule (the console's table)
    if (
        late is not None and late > LATE_MAX
    ):  # the load generator did not deliver the schedule: this step measured the client
        return {
            "passed": False,
            "invalid": True,
            "reasons": reasons
            + [
                f"client behind its schedule: {late:.0%} of arrivals sent more than half a gap late: not a measurement"
            ],
            **measured,
        }
    return {
        "passed": not reasons,
        "reasons": reasons,
        **measured,
        **({"classes_missed": [n for n, _ in missed]} if missed else {}),
    }


# ------------------------------------------------------------------------------------- the search
def next_rate(lo: float | None, hi: float | None, failures: int, kept_up: float | None = None) -> float:
    """The next rate to try given the highest pass `lo`, the lowest failure `hi` so far and, when the last
    failure was over-saturated, the completion rate it kept up (a measurement of the capacity)."""
    if hi is None:
        assert lo is not None
        return lo * 1.25
    if lo is None:
        guess = hi * (FIRST_RETRY if failures == 1 else 0.5)
        if kept_up is not None and kept_up < hi:
            guess = min(guess, SATURATED_RETRY * kept_up)
        return guess
    return (lo + hi) / 2.0


def _step_size(a: LoadOptions, rate: float) -> tuple[int, float]:
    n = a.num_prompts or int(min(STEP_MAX, max(STEP_MIN, round(rate * STEP_SECONDS))))
    return n, (a.run_time or n / rate * 1.5 + 10.0)


def run_search(a: Options, run_one: RunOne) -> int:
    """Search the highest rate that holds the SLO; write sweep.json (kind max_rate_search; --output-file gets it too)
    and the report."""
    slo = Slo.parse([a.measure.goodput])
    runner = StepRunner(a, run_one, SEARCH_STEPS)
    base = runner.base
    steps: list[dict[str, Any]] = []
    lo = hi = None
    failures = 0
    kept_up: float | None = None
    retried = False
    with shared_host(a) as host:
        n = a.load.num_prompts or PROBE_REQUESTS
        print("vllm-locust: search step 1: throughput probe (every request at once)", flush=True)
        ran = runner.step(
            host, 1, "probe", console=CONSOLE, users=None, request_rate=math.inf, num_prompts=n, run_time=None
        )
        if ran.code == exit_codes.INTERRUPTED:
            return ran.code
        probe = summarize_step(ran.name, "throughput", None, ran.run_dir, ran.code)
        probe.update(verdict="probe", requests=n)
        steps.append(probe)
        capacity = probe.get("achieved_rate")
        if not capacity:
            raise C.UsageError(
                "--find-max-rate: the throughput probe completed no request; is the server up?"
            )
        rate = round(capacity, 3)
        while len(steps) < a.capacity.search_steps:
            count, limit = _step_size(a.load, rate)
            print(f"vllm-locust: search step {len(steps) + 1}: {rate:g} req/s ({count} requests)", flush=True)
            ran = runner.step(
                host,
                len(steps) + 1,
                f"rate-{rate:g}",
                watch=SaturationWatch(slo, rate),
                console=CONSOLE,
                users=None,
                request_rate=rate,
                num_prompts=count,
                run_time=limit,
            )
            code = ran.code
            s = summarize_step(ran.name, "rate", rate, ran.run_dir, code)
            v = judge(ran.run_dir, rate, slo, a.capacity.slo_percentile, a.capacity.max_error_rate)
            retry = v.get("invalid") and not retried
            s.update(
                verdict="holds" if v["passed"] else ("invalid" if retry else "fails"),
                judgement=v,
                requests=count,
            )
            steps.append(s)
            if code == exit_codes.INTERRUPTED:
                break
            if retry:
                retried = True
                print(f"vllm-locust: {rate:g} req/s: invalid ({v['reasons'][-1]}); once more", flush=True)
                continue
            retried = False
            print(
                f"vllm-locust: {rate:g} req/s: {s['verdict']}"
                + ("" if v["passed"] else ": " + "; ".join(v["reasons"])),
                flush=True,
            )
            if v["passed"]:
                lo = rate if lo is None else max(lo, rate)
            else:
                failures += 1
                hi = rate if hi is None else min(hi, rate)
                kept_up = v.get("achieved_completion_rate")
            if lo is not None and hi is not None and (hi - lo) <= a.capacity.search_tolerance * lo:
                break
            rate = round(next_rate(lo, hi, failures, kept_up), 3)
    doc = {
        "kind": "max_rate_search",
        "sweep": "find-max-rate",
        "host": redact_url(a.server.host) or "embedded simulator",
        "slo_ms": slo.limits_ms,
        "slo_percentile": a.capacity.slo_percentile,
        "max_error_rate": a.capacity.max_error_rate,
        "probe_capacity_rps": capacity,
        "max_rate": lo,
        "lowest_failing_rate": hi,
        "steps": steps,
        "resolution": _resolution(lo, hi),
        "range": search_range(steps, lo, hi, a.capacity.search_tolerance),
    }
    first_miss = next(
        (
            s["judgement"].get("classes_missed")
            for s in steps
            if s.get("target") == hi and s.get("judgement", {}).get("classes_missed")
        ),
        None,
    )
    if first_miss:  # the class that limits the rate: it missed its SLO first (at the lowest failing rate)
        doc["limiting_classes"] = first_miss
    add_step_costs(steps, a.capacity.gpu_hour_price, a.capacity.gpus)
    if a.capacity.gpu_hour_price:
        best = next((s for s in steps if s["target"] == lo and s.get("verdict") == "holds"), None)
        doc["cost"] = {
            "gpu_hour_price_usd": a.capacity.gpu_hour_price,
            "gpus": a.capacity.gpus,
            "at_slo_max_rate": cost_at(
                a.capacity.gpu_hour_price, a.capacity.gpus, best[K.OUTPUT_THROUGHPUT], best["achieved_rate"]
            )
            if best
            else None,
            "at_measured_rate": cost_at(
                a.capacity.gpu_hour_price, a.capacity.gpus, probe[K.OUTPUT_THROUGHPUT], probe["achieved_rate"]
            ),
        }
    atomic_json(os.path.join(base, SWEEP), doc)
    write_output_file(a.outputs, doc)
    print(format_search(doc, base), flush=True)
    if doc.get("cost"):
        print("\n".join(format_cost(doc["cost"])).replace("measured rate", "probe's throughput"), flush=True)
    if not a.outputs.no_report:
        from orchestration.report.sweep_report import rewrite_report

        print(f"vllm-locust: search report {rewrite_report(base)}", flush=True)
    return 0 if lo is not None else 1


def _resolution(lo: float | None, hi: float | None) -> dict[str, Any]:
    return {
        "low": lo,
        "high": hi,
        "relative": (hi - lo) / lo if lo and hi else None,
        "meaning": "the SLO held at `low` and failed at `high`: how close bisection got, not the answer's "
        "statistical uncertainty (`range`)",
    }
