"""`--sweep rates:1,2,4,8 | concurrency:1,8,32 | auto[:N]`: one run directory per step, sweep.json, one report.

- `rates:` open loop at each rate (the run's --burstiness, --max-concurrency).
- `concurrency:` closed loop with that many users (`--concurrency-sweep 1,2,4` is the same as
  `--sweep concurrency:1,2,4`).
- `auto` (GuideLLM's sweep): synchronous (1 user), then throughput (every request at once), then N rates
  (default 5) evenly between the two achieved request rates.
`--output-file F` gets sweep.json's object too (a step writes none).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

from orchestration.capacity.cost import add_step_costs
from orchestration.capacity.search_table import Cell, aligned, filled, verdict_cell
from orchestration.capacity.steps import (
    CONSOLE,
    SWEEP_STEPS,
    RunOne,
    StepRunner,
    shared_host,
    summarize_step,
    with_delivery,
    write_output_file,
)
from orchestration.report.sweep_answer import slo_answer, sweep_headline
from vllm_users import exit_codes
from vllm_users.atomic import atomic_json
from vllm_users.capacity_options import SweepPlan, parse_sweep
from vllm_users.distributed.options import LoadOptions
from vllm_users.measure import metric_keys as K
from vllm_users.measure.metric_keys import percentile_name
from vllm_users.measure.metrics import Slo
from vllm_users.options import Options, env_api_key
from vllm_users.redact import connection_headers, header_lines, redact_url
from vllm_users.run_dir import SWEEP

__all__ = ["SweepPlan", "format_sweep", "parse_sweep", "run_sweep", "step_line", "sweep_columns", "sweep_doc"]

STEP_SECONDS = 20.0  # a rate step without --num-prompts/--run-time sends rate x 20 s requests...
STEP_MIN, STEP_MAX = 20, 400  # ...at least 20, at most 400


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
    runner = StepRunner(a, run_one, SWEEP_STEPS)
    base = runner.base
    steps: list[dict[str, Any]] = []
    worst = 0

    slo = Slo.parse([a.measure.goodput]) if a.measure.goodput else None

    def step(host: str, what: str, kind: str, target: float | None, over: dict[str, Any]) -> dict[str, Any]:
        nonlocal worst
        from orchestration.server.moe_experts import expert_balance, expert_counters

        number = len(steps) + 1
        print(
            f"vllm-locust: sweep step {number}: {kind} {'' if target is None else format(target, 'g')}".rstrip(),
            flush=True,
        )
        url, auth = connection_headers(
            host, header_lines(a.request.header), a.server.api_key or env_api_key()
        )
        before = expert_counters(url, headers=auth)
        ran = runner.step(host, number, what, console=CONSOLE, **over)
        code = ran.code
        worst = max(worst, code)
        s = summarize_step(ran.name, kind, target, ran.run_dir, code)
        if kind == "concurrency":
            s["concurrency"] = int(target or 0)
        load = expert_balance(before, expert_counters(url, headers=auth))
        if load is not None:
            s["expert_load"] = load
        if slo is not None:
            _judge(s, a, slo)
        steps.append(s)
        print(f"vllm-locust: {s['label']}: {step_line(s)}", flush=True)
        if code == exit_codes.INTERRUPTED:
            raise KeyboardInterrupt  # Ctrl-C: no further step; what ran is written below
        return s

    interrupted = False
    try:
        _run_plan(a, plan, step)
    except KeyboardInterrupt:
        interrupted = True
    doc = sweep_doc(plan, steps, a)
    doc[K.INTERRUPTED] = interrupted
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


def _judge(s: dict[str, Any], a: Options, slo: Slo) -> None:
    """A step of a sweep run with --goodput: the search's verdict (orchestration.capacity.search.judge) at
    --slo-percentile and --max-error-rate, so that a sweep and a search answer the same question alike."""
    from orchestration.capacity.search import judge

    v = judge(
        s["run_dir"], s["target"] or math.inf, slo, a.capacity.slo_percentile, a.capacity.max_error_rate
    )
    v = with_delivery(s, v)
    s.update(verdict="holds" if v["passed"] else "fails", judgement=v)


def step_line(s: dict[str, Any]) -> str:
    """One step's progress line once it ran: what it achieved and, against an SLO, its verdict."""
    rate, ttft = s.get("achieved_rate"), s.get("ttft_p50_ms")
    if rate is None:
        return f"no request completed (exit {s.get('exit_code')})"
    out = f"{rate:.3g} req/s" + (f", TTFT p50 {ttft:.1f} ms" if ttft is not None else "")
    reasons = (s.get("judgement") or {}).get("reasons") or []
    if s.get("verdict") in ("holds", "fails"):
        out += f"; {s['verdict']}" + (": " + "; ".join(reasons) if reasons else "")
    return out


def sweep_doc(plan: SweepPlan, steps: list[dict[str, Any]], a: Options) -> dict[str, Any]:
    """sweep.json: the plan, every step and (concurrency steps) the scaling efficiency against 1 user."""
    base = next(
        (
            s[K.OUTPUT_THROUGHPUT]
            for s in steps
            if s["kind"] == "synchronous" or (s["kind"] == "concurrency" and s["target"] == 1)
        ),
        None,
    )
    for s in steps:
        if s["kind"] == "concurrency":
            tput = s.get(K.OUTPUT_THROUGHPUT)
            s["scaling_efficiency"] = tput / (s["target"] * base) if base and tput is not None else None
    add_step_costs(steps, a.capacity.gpu_hour_price, a.capacity.gpus)
    doc: dict[str, Any] = {
        "kind": "concurrency_sweep" if plan.kind == "concurrency" else f"{plan.kind}_sweep",
        "sweep": a.capacity.sweep,
        "host": redact_url(a.server.host) or "embedded simulator",
        "preset": a.source.preset,
        "steps": steps,
        "baseline_output_throughput": base,
    }
    if a.measure.goodput:  # judged against the SLO: the highest achieved rate that held it
        doc.update(
            slo_ms=Slo.parse([a.measure.goodput]).limits_ms,
            slo_percentile=a.capacity.slo_percentile,
            max_error_rate=a.capacity.max_error_rate,
        )
        best, miss = slo_answer(doc)
        doc[
            "within_slo"
        ] = {  # the heaviest step that held, its achieved rate, and the next heavier that failed
            "step": best["name"] if best else None,
            "achieved_rate": best.get("achieved_rate") if best else None,
            "first_miss": miss["name"] if miss else None,
        }
    return doc


def _num(spec: str, key: str) -> Cell:
    def cell(s: dict[str, Any], _p: str) -> str | None:
        v = s.get(key)
        return format(v, spec) if isinstance(v, int | float) and not isinstance(v, bool) else None

    return cell


def _experts(key: str, spec: str) -> Cell:
    def cell(s: dict[str, Any], _p: str) -> str | None:
        v = (s.get("expert_load") or {}).get(key)
        return format(v, spec) if isinstance(v, int | float) else None

    return cell


def _slo_at(metric: str) -> Cell:
    def cell(s: dict[str, Any], _p: str) -> str | None:
        v = ((s.get("judgement") or {}).get("slo_values_ms") or {}).get(metric)
        return f"{v:.1f}" if isinstance(v, int | float) else None

    return cell


def _verdict(s: dict[str, Any], pname: str) -> str | None:
    if s.get("verdict") == "failed start":  # sweep-server: a point whose server never answered
        return f"failed start: {s.get('error')}" if s.get("error") else "failed start"
    return verdict_cell(s, pname)


def sweep_columns(doc: dict[str, Any]) -> list[tuple[str, Cell]]:
    """The sweep table's columns (filled() leaves out those no step has a value for); against an SLO at a
    percentile other than p50 and p99, each SLO metric there too (from the step's judgement)."""
    pname = percentile_name(float(doc.get("slo_percentile") or 99.0))
    at_slo = [
        (f"{m.upper()} {pname}", _slo_at(m)) for m in (doc.get("slo_ms") or {}) if pname not in ("p50", "p99")
    ]
    return [
        ("step", lambda s, _p: str(s.get("label") or s.get("kind") or s.get("name"))),
        ("startup s", _num(".1f", "startup_s")),
        ("req/s", _num(".3g", "achieved_rate")),
        ("ok", _num("d", K.COMPLETED)),
        ("failed", _num("d", K.FAILED)),
        ("out tok/s", _num(".1f", K.OUTPUT_THROUGHPUT)),
        ("TTFT p50", _num(".1f", "ttft_p50_ms")),
        ("TTFT p99", _num(".1f", "ttft_p99_ms")),
        ("TPOT p50", _num(".2f", "tpot_p50_ms")),
        ("TPOT p99", _num(".2f", "tpot_p99_ms")),
        ("E2EL p99", _num(".1f", "e2el_p99_ms")),
        *at_slo,
        ("tok/s/user", _num(".1f", "output_tok_per_s_per_user")),
        ("efficiency", _num(".2f", "scaling_efficiency")),
        ("experts max/mean", _experts("max_over_mean", ".2f")),
        ("experts CV", _experts("cv", ".3f")),
        ("$/1M out tok", _num(".4g", "usd_per_million_output_tokens")),
        ("verdict", _verdict),
    ]


def format_sweep(doc: dict[str, Any], path: str) -> str:
    """The sweep's console answer: its headline (orchestration.report.sweep_report.sweep_headline) first, then
    every step in one table without the columns no step has a value for, then where sweep.json is."""
    title = "concurrency sweep" if doc["kind"] == "concurrency_sweep" else doc["kind"].replace("_", " ")
    pname = percentile_name(float(doc.get("slo_percentile") or 99.0))
    header, rows = filled(sweep_columns(doc), doc.get("steps") or [], pname)
    return "\n".join(
        [
            *(f"vllm-locust: {x}" for x in sweep_headline(doc)),
            f"=== {title} ===",
            *aligned(header, rows),
            f"Sweep: {os.path.join(path, SWEEP)} (each step's own summary: its directory's {CONSOLE})",
        ]
    )
