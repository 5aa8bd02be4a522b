"""`--repeats N`: the same run N times (one run directory each), every metric's mean with a 95 % CI.

Layout: `D/repeat-01 … repeat-NN` (ordinary run directories) and `D/repeats.json`, which `vllm-locust
report` recognises (orchestration.report.run_sets reads it): a repeated run then compares by Welch's t-test
over its repeats. `--output-file F` gets repeats.json's object too (a step writes none).
"""

from __future__ import annotations

import os
from typing import Any

from orchestration.capacity.steps import REPEAT_STEPS, RunOne, StepRunner, shared_host, write_output_file
from orchestration.report.run_sets import aggregate
from vllm_users import exit_codes
from vllm_users.atomic import atomic_json
from vllm_users.measure.run_result import load_result
from vllm_users.options import Options
from vllm_users.run_dir import REPEATS

__all__ = ["SUMMARY_METRICS", "format_repeats", "run_repeats"]

# Printed after the repeats (every metric is in repeats.json and the report).
SUMMARY_METRICS = (
    "request_throughput",
    "output_throughput",
    "request_goodput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
)


def run_repeats(a: Options, run_one: RunOne) -> int:
    """Run `a` a.capacity.repeats times into one directory and write repeats.json (and --output-file); returns the worst
    exit code."""
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
    results = []
    for d in names:
        res = load_result(runner.path(d))
        if res is not None:
            results.append(res.to_json())
        else:
            print(f"vllm-locust: warning: {d} wrote no result; left out of the repeats", flush=True)
    doc = {"repeats": n, "runs": names, "confidence": 0.95, "metrics": aggregate(results) if results else {}}
    atomic_json(os.path.join(base, REPEATS), doc)
    write_output_file(a.outputs, doc)
    print(format_repeats(doc, base), flush=True)
    if not a.outputs.no_report:
        from orchestration.report.generate import report_after_run

        report_after_run(base)
    return worst


def format_repeats(doc: dict[str, Any], path: str) -> str:
    """The headline metrics as mean ± 95 % CI half-width over the repeats."""
    lines = [f"{' Over ' + str(doc['repeats']) + ' repeats (mean ± 95 % CI) ':=^66}"]
    for name in SUMMARY_METRICS:
        m = doc["metrics"].get(name)
        if m:
            hw = "n/a" if m["ci_half_width"] is None else f"{m['ci_half_width']:.4g}"
            lines.append(f"{name:<28}{m['mean']:>14.4g} ± {hw:<10} (n={m['n']})")
    lines.append(f"Repeats: {os.path.join(path, REPEATS)}")
    return "\n".join(lines)
