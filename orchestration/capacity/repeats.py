"""`--repeats N`: the same run N times (one run directory each), every metric's mean with a 95 % CI.

Layout: `D/repeat-01 … repeat-NN` (ordinary run directories) and `D/repeats.json`, which `vllm-locust
report` recognises (orchestration.report.run_sets reads it): a repeated run then compares by Welch's t-test
over its repeats. `--output-file F` gets repeats.json's object too (a step writes none).

A repeat that measured nothing (no request completed or failed in its measured window, or no result) is left
out: repeats.json's `runs` and every mean and n are over the others, `left_out` names it with its reason.
"""

from __future__ import annotations

import os
from typing import Any

from orchestration.capacity.steps import REPEAT_STEPS, RunOne, StepRunner, shared_host, write_output_file
from orchestration.report.run_sets import aggregate
from vllm_users import exit_codes
from vllm_users.atomic import atomic_json
from vllm_users.measure import metric_keys as K
from vllm_users.measure.result_notes import no_completed_reason
from vllm_users.measure.run_result import RunResult, load_result
from vllm_users.options import Options
from vllm_users.run_dir import REPEATS

__all__ = ["SUMMARY_METRICS", "format_repeats", "nothing_measured", "run_repeats"]

# Printed after the repeats (every metric is in repeats.json and the report).
SUMMARY_METRICS = (
    K.REQUEST_THROUGHPUT,
    K.OUTPUT_THROUGHPUT,
    K.REQUEST_GOODPUT,
    K.TTFT.key("median"),
    K.TTFT.p(99),
    K.TPOT.key("median"),
    K.TPOT.p(99),
    K.ITL.key("median"),
    K.E2EL.key("median"),
    K.E2EL.p(99),
)


def run_repeats(a: Options, run_one: RunOne) -> int:
    """Run `a` a.capacity.repeats times into one directory and write repeats.json (and --output-file); returns the worst
    exit code. A repeat that measured nothing is left out of the means and named (repeats.json's `left_out`)."""
    n = int(a.capacity.repeats)
    runner = StepRunner(a, run_one, REPEAT_STEPS)
    base = runner.base
    worst, names = 0, []
    with shared_host(a) as host:  # one server for every repeat: the repeats differ only by chance
        for i in range(1, n + 1):
            print(f"vllm-locust: repeat {i}/{n}", flush=True)
            step = runner.step(host, i, repeats=1)
            worst = max(worst, step.code)
            names.append(step.name)
            if step.code == exit_codes.INTERRUPTED:
                break  # Ctrl-C: no further repeat; the ones that ran are aggregated
    measured, left_out, results = [], [], []
    for i, d in enumerate(names, 1):
        res = load_result(runner.path(d))
        why = nothing_measured(res)
        if why is None and res is not None:
            measured.append(d)
            results.append(res.to_json())
        else:  # averaged in, its zeros would pull every mean down and widen every interval
            left_out.append({"run": d, "reason": why})
            print(f"vllm-locust: repeat {i} measured nothing: {why}; left out of the means", flush=True)
    doc = {
        "repeats": n,
        "runs": measured,  # the repeats the means are over (the report and the gate read these)
        "left_out": left_out,
        "confidence": 0.95,
        "metrics": aggregate(results) if results else {},
    }
    atomic_json(os.path.join(base, REPEATS), doc)
    write_output_file(a.outputs, doc)
    print(format_repeats(doc, base), flush=True)
    if not a.outputs.no_report and measured:
        from orchestration.report.generate import report_after_run

        report_after_run(base)
    return worst


def nothing_measured(res: RunResult | None) -> str | None:
    """Why a repeat has nothing to average (no result; no request completed or failed in its measured window);
    None when it measured something (failures are a measurement: a repeat whose requests all failed stays)."""
    if res is None:
        return "it wrote no result (see its master.log)"
    if res.completed or res.failed:
        return None
    return no_completed_reason(res) or "no request completed or failed in its measured window"


def format_repeats(doc: dict[str, Any], path: str) -> str:
    """The headline metrics as mean ± 95 % CI half-width over the repeats that measured something."""
    left = doc.get("left_out") or []
    over = f"{len(doc['runs'])} of {doc['repeats']}" if left else str(doc["repeats"])
    lines = [f"{' Over ' + over + ' repeats (mean ± 95 % CI) ':=^66}"]
    for name in SUMMARY_METRICS:
        m = doc["metrics"].get(name)
        if m:
            hw = "n/a" if m["ci_half_width"] is None else f"{m['ci_half_width']:.4g}"
            lines.append(f"{name:<28}{m['mean']:>14.4g} ± {hw:<10} (n={m['n']})")
    if not doc["runs"]:
        lines.append("No repeat measured anything: no means")
    for x in left:
        lines.append(f"Left out: {x['run']}: measured nothing")
    lines.append(f"Repeats: {os.path.join(path, REPEATS)}")
    return "\n".join(lines)
