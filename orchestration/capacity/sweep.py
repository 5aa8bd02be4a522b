"""`--sweep rates:1,2,4,8 | concurrency:1,8,32 | auto[:N]`: one run directory per step, sweep.json, one report.

- `rates:` open loop at each rate (the run's --burstiness, --max-concurrency).
- `concurrency:` closed loop with that many users (`--concurrency-sweep 1,2,4` is the same as
  `--sweep concurrency:1,2,4`).
- `auto` (GuideLLM's sweep): synchronous (1 user), then throughput (every request at once), then N rates
  (default 5) evenly between the two achieved request rates.
`--output-file F` gets sweep.json's object too (a step writes none).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orchestration.capacity.cost import add_step_costs
from orchestration.capacity.steps import (
    SWEEP_STEPS,
    RunOne,
    StepRunner,
    read_step,
    shared_host,
    write_output_file,
)
from orchestration.settings import config as C
from vllm_users import exit_codes
from vllm_users.atomic import atomic_json
from vllm_users.distributed.options import LoadOptions
from vllm_users.options import Options, env_api_key
from vllm_users.redact import connection_headers, header_lines, redact_url
from vllm_users.run_dir import SWEEP

__all__ = [
    "STEP_FIELDS",
    "SweepPlan",
    "format_sweep",
    "parse_sweep",
    "run_sweep",
    "summarize_step",
    "sweep_doc",
]

AUTO_RATES = 5
STEP_SECONDS = 20.0  # a rate step without --num-prompts/--run-time sends rate x 20 s requests...
STEP_MIN, STEP_MAX = 20, 400  # ...at least 20, at most 400
# per step: (result key, sweep.json key)
STEP_FIELDS = (
    ("completed", "completed"),
    ("failed", "failed"),
    ("duration", "duration"),
    ("request_throughput", "achieved_rate"),
    ("output_throughput", "output_throughput"),
    ("total_token_throughput", "total_token_throughput"),
    ("request_goodput", "request_goodput"),
    ("median_ttft_ms", "ttft_p50_ms"),
    ("p99_ttft_ms", "ttft_p99_ms"),
    ("median_tpot_ms", "tpot_p50_ms"),
    ("p99_tpot_ms", "tpot_p99_ms"),
    ("median_itl_ms", "itl_p50_ms"),
    ("p99_itl_ms", "itl_p99_ms"),
    ("median_e2el_ms", "e2el_p50_ms"),
    ("p99_e2el_ms", "e2el_p99_ms"),
    ("max_concurrent_requests", "max_concurrent_requests"),
)


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
    raise C.UsageError(f"--sweep {text!r}: {want}")


def _rate_prompts(a: LoadOptions, rate: float) -> int | None:
    if a.num_prompts is not None or a.run_time is not None:
        return a.num_prompts
    return int(min(STEP_MAX, max(STEP_MIN, round(rate * STEP_SECONDS))))


def _closed(a: LoadOptions, users: int) -> dict[str, Any]:
    return {
        "users": users,
        "request_rate": None,
        "max_concurrency": None,
        "num_prompts": a.num_prompts if (a.num_prompts or a.run_time) else max(STEP_MIN, 4 * users),
    }


def _rate(a: Options, rate: float) -> dict[str, Any]:
    return {"users": None, "request_rate": rate, "num_prompts": _rate_prompts(a.load, rate)}


def run_sweep(a: Options, run_one: RunOne) -> int:
    """Run every step of a.capacity.sweep, write sweep.json (and --output-file) and the combined report; returns the worst
    exit code."""
    plan = parse_sweep(a.capacity.sweep)
    if plan.kind == "concurrency" and a.load.request_rate is not None:
        raise C.UsageError("--sweep concurrency: runs closed loop: leave out --request-rate")
    runner = StepRunner(a, run_one, SWEEP_STEPS)
    base = runner.base
    steps: list[dict[str, Any]] = []
    worst = 0

    def step(host: str, what: str, kind: str, target: float | None, over: dict[str, Any]) -> dict[str, Any]:
        nonlocal worst
        from orchestration.server.moe_experts import expert_balance, expert_counters

        number = len(steps) + 1
        print(
            f"vllm-locust: sweep step {number}: {kind} {'' if target is None else format(target, 'g')}",
            flush=True,
        )
        url, auth = connection_headers(
            host, header_lines(a.request.header), a.server.api_key or env_api_key()
        )
        before = expert_counters(url, headers=auth)
        ran = runner.step(host, number, what, **over)
        code = ran.code
        worst = max(worst, code)
        s = summarize_step(ran.name, kind, target, ran.run_dir, code)
        if kind == "concurrency":
            s["concurrency"] = int(target or 0)
        load = expert_balance(before, expert_counters(url, headers=auth))
        if load is not None:
            s["expert_load"] = load
        steps.append(s)
        if code == exit_codes.INTERRUPTED:
            raise KeyboardInterrupt  # Ctrl-C: no further step; what ran is written below
        return s

    interrupted = False
    try:
        _run_plan(a, plan, step)
    except KeyboardInterrupt:
        interrupted = True
    doc = sweep_doc(plan, steps, a)
    doc["interrupted"] = interrupted
    atomic_json(os.path.join(base, SWEEP), doc)
    write_output_file(a.outputs, doc)
    print(format_sweep(doc, base), flush=True)
    if not a.outputs.no_report:
        from orchestration.report.sweep_report import write_sweep_report

        print(f"vllm-locust: sweep report {write_sweep_report(base)}", flush=True)
    return exit_codes.INTERRUPTED if interrupted else worst


def _run_plan(a: Options, plan: SweepPlan, step: Callable[..., dict[str, Any]]) -> None:
    """The steps of `plan`, in order (auto: the rates come from the first two steps' results)."""
    with shared_host(a) as host:
        if plan.kind == "rates":
            for r in plan.values:
                step(host, f"rate-{r:g}", "rate", r, _rate(a, r))
        elif plan.kind == "concurrency":
            for c in plan.values:
                step(host, f"c{int(c):03d}", "concurrency", c, _closed(a.load, int(c)))
        else:
            sync = step(host, "synchronous", "synchronous", None, _closed(a.load, 1))
            n_thr = a.load.num_prompts or STEP_MAX
            thr = step(
                host,
                "throughput",
                "throughput",
                None,
                {"users": None, "request_rate": math.inf, "num_prompts": n_thr},
            )
            lo, hi = sync.get("achieved_rate"), thr.get("achieved_rate")
            if not lo or not hi or hi <= lo:
                print(
                    f"vllm-locust: warning: auto sweep: throughput ({hi}) not above synchronous ({lo}); no rates between",
                    flush=True,
                )
            else:
                n = int(plan.values[0])
                for k in range(1, n + 1):
                    r = round(lo + (hi - lo) * k / (n + 1), 4)
                    step(host, f"rate-{r:g}", "rate", r, _rate(a, r))


def summarize_step(name: str, kind: str, target: float | None, run_dir: str, code: int) -> dict[str, Any]:
    """One step's row of sweep.json: what it was asked, what it achieved, its latency percentiles."""
    res = read_step(run_dir)
    s: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "target": target,
        "run_dir": run_dir,
        "exit_code": code,
        "label": kind if target is None else f"{kind} {target:g}",
    }
    for key, out in STEP_FIELDS:
        v = res.get(key)
        s[out] = v if isinstance(v, int | float) and not isinstance(v, bool) else None
    tpot = s.get("tpot_p50_ms")
    s["output_tok_per_s_per_user"] = 1000.0 / tpot if tpot else None  # a user's stream speed (median TPOT)
    # kept for the concurrency sweep's readers (moe preset)
    s["median_ttft_ms"], s["median_tpot_ms"] = s["ttft_p50_ms"], s["tpot_p50_ms"]
    s["request_throughput"] = s["achieved_rate"]
    if res.get("repeats"):
        s["repeats"] = {
            k: {x: m[x] for x in ("ci_low", "ci_high", "n")}
            for k, m in res["repeats"].get("metrics", {}).items()
            if k in dict(STEP_FIELDS)
        }
    return s


def sweep_doc(plan: SweepPlan, steps: list[dict[str, Any]], a: Options) -> dict[str, Any]:
    """sweep.json: the plan, every step and (concurrency steps) the scaling efficiency against 1 user."""
    base = next(
        (
            s["output_throughput"]
            for s in steps
            if s["kind"] == "synchronous" or (s["kind"] == "concurrency" and s["target"] == 1)
        ),
        None,
    )
    for s in steps:
        if s["kind"] == "concurrency":
            tput = s.get("output_throughput")
            s["scaling_efficiency"] = tput / (s["target"] * base) if base and tput is not None else None
    add_step_costs(steps, a.capacity.gpu_hour_price, a.capacity.gpus)
    return {
        "kind": "concurrency_sweep" if plan.kind == "concurrency" else f"{plan.kind}_sweep",
        "sweep": a.capacity.sweep,
        "host": redact_url(a.server.host) or "embedded simulator",
        "preset": a.source.preset,
        "steps": steps,
        "baseline_output_throughput": base,
    }


def _f(v: Any, spec: str) -> str:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return format(v, spec)
    width = "".join(itertools.takewhile(str.isdigit, spec))
    return format("-", ">" + width)


def format_sweep(doc: dict[str, Any], path: str) -> str:
    """The sweep as a console table."""
    title = "concurrency sweep" if doc["kind"] == "concurrency_sweep" else doc["kind"].replace("_", " ")
    rows = [
        f"{'step':<24}{'target':>8}{'req/s':>8}{'out tok/s':>10}{'TTFT p50':>9}{'TTFT p99':>9}"
        f"{'TPOT p50':>9}{'TPOT p99':>9}{'E2EL p99':>9}{'tok/s/user':>11}"
    ]
    for s in doc["steps"]:
        g = s.get
        rows.append(
            f"{str(g('label') or g('kind'))[:23]:<24}{_f(g('target'), '8g')}{_f(g('achieved_rate'), '8.2f')}"
            f"{_f(g('output_throughput'), '10.1f')}{_f(g('ttft_p50_ms'), '9.1f')}{_f(g('ttft_p99_ms'), '9.1f')}"
            f"{_f(g('tpot_p50_ms'), '9.2f')}{_f(g('tpot_p99_ms'), '9.2f')}{_f(g('e2el_p99_ms'), '9.1f')}"
            f"{_f(g('output_tok_per_s_per_user'), '11.1f')}"
        )
        if s.get("scaling_efficiency") is not None:
            rows[-1] += f"  efficiency {s['scaling_efficiency']:.2f}"
        if s.get("expert_load") and s["expert_load"].get("max_over_mean") is not None:
            rows[-1] += (
                f"  experts max/mean {s['expert_load']['max_over_mean']:.2f} CV {s['expert_load']['cv']:.3f}"
            )
    return "\n".join([f"=== {title} ===", *rows, f"Sweep: {os.path.join(path, SWEEP)}"])
